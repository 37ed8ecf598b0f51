//! From requirements to the wheels that satisfy them: each named package and what it needs,
//! in turn, the newest version whose wheel fits the guest and every requirement seen so far;
//! what the runtime or the session already has is kept, never replaced. A requirement met
//! later that the chosen version does not satisfy is a conflict, refused with both sides named
//! (there is no backtracking: a resolution that needs one is refused, not guessed at).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;

use bytes::Bytes;
use pep508_rs::pep440_rs::{Operator, Version, VersionSpecifiers};
use pep508_rs::{ExtraName, MarkerEnvironment, PackageName, Requirement, VersionOrUrl};

use super::Refusal;
use super::index::IndexFile;
use super::metadata::{self, Metadata};
use super::policy::Policy;
use super::wheel::{GuestTags, WheelName};

/// Where wheels come from: the indexes and the cache.
pub trait Source {
    /// The files the indexes list for `name` (empty: no index has it).
    fn files(&self, name: &PackageName) -> impl Future<Output = Result<Vec<IndexFile>, Refusal>>;
    /// The bytes of `file` of `name`, at most `max` of them, checked against its hash.
    fn wheel(
        &self,
        name: &PackageName,
        file: &IndexFile,
        max: u64,
    ) -> impl Future<Output = Result<Fetched, Refusal>>;
}

/// A wheel's bytes, and whether they came from the cache.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub bytes: Bytes,
    pub cached: bool,
}

/// What is already installed where a resolution installs: a version, and where it is (the
/// runtime's own packages, or the session's installs).
pub type Installed = BTreeMap<PackageName, (Version, Place)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Runtime,
    Session,
}

impl Place {
    fn as_str(self) -> &'static str {
        match self {
            Place::Runtime => "the runtime",
            Place::Session => "the session",
        }
    }
}

/// The guest a resolution is for.
#[derive(Debug)]
pub struct Guest<'a> {
    pub tags: GuestTags,
    /// Its Python, for markers and Requires-Python.
    pub markers: &'a MarkerEnvironment,
    pub python: &'a Version,
    pub installed: &'a Installed,
}

/// A wheel to install.
#[derive(Debug, Clone)]
pub struct Planned {
    pub name: PackageName,
    pub version: Version,
    pub filename: String,
    /// Where the index lists it.
    pub url: String,
    pub sha256: String,
    pub bytes: Bytes,
    pub cached: bool,
    /// The package whose requirement brought it in; None for one asked for.
    pub needed_by: Option<PackageName>,
}

/// What a resolution comes to: wheels to install, in the order found, and the requirements
/// asked for that are already met.
#[derive(Debug, Default)]
pub struct Plan {
    pub install: Vec<Planned>,
    pub satisfied: Vec<(PackageName, Version)>,
}

/// One requirement to meet, and who asked.
struct Want {
    requirement: Requirement,
    by: Option<PackageName>,
}

struct Chosen {
    planned: Planned,
    metadata: Metadata,
    extras: BTreeSet<ExtraName>,
}

/// Resolves `requirements` for `guest` from `source` under `policy`.
pub async fn resolve(
    requirements: Vec<Requirement>,
    guest: &Guest<'_>,
    policy: &Policy,
    source: &impl Source,
) -> Result<Plan, Refusal> {
    let mut queue: VecDeque<Want> = requirements
        .into_iter()
        .map(|requirement| Want {
            requirement,
            by: None,
        })
        .collect();
    let mut chosen: BTreeMap<PackageName, Chosen> = BTreeMap::new();
    let mut order = Vec::new();
    let mut satisfied = Vec::new();
    while let Some(want) = queue.pop_front() {
        let name = want.requirement.name.clone();
        let specifiers = specifiers_of(&want.requirement)?;
        if let Some((version, place)) = guest.installed.get(&name) {
            check_met(&name, &specifiers, version, place.as_str(), &want.by)?;
            if want.by.is_none() {
                satisfied.push((name, version.clone()));
            }
            continue;
        }
        if let Some(done) = chosen.get_mut(&name) {
            check_met(
                &name,
                &specifiers,
                &done.planned.version,
                "this install",
                &want.by,
            )?;
            let new: Vec<ExtraName> = want
                .requirement
                .extras
                .iter()
                .filter(|e| !done.extras.contains(*e))
                .cloned()
                .collect();
            if !new.is_empty() {
                done.extras.extend(new);
                needs(done, guest, &mut queue);
            }
            continue;
        }
        policy.admit(&name, want.by.as_ref())?;
        let mut done = choose(&name, &specifiers, &want.by, guest, policy, source).await?;
        done.extras = want.requirement.extras.iter().cloned().collect();
        needs(&done, guest, &mut queue);
        order.push(name.clone());
        chosen.insert(name, done);
    }
    if order.len()
        > policy
            .max_per_session
            .saturating_sub(installed_in_session(guest))
    {
        return Err(Refusal::TooMany {
            wanted: order.len(),
            max: policy.max_per_session,
        });
    }
    let install = order
        .iter()
        .filter_map(|name| chosen.remove(name).map(|c| c.planned))
        .collect();
    Ok(Plan { install, satisfied })
}

fn installed_in_session(guest: &Guest<'_>) -> usize {
    guest
        .installed
        .values()
        .filter(|(_, place)| *place == Place::Session)
        .count()
}

/// A requirement's version specifiers: names and versions only, never a URL.
fn specifiers_of(requirement: &Requirement) -> Result<VersionSpecifiers, Refusal> {
    match &requirement.version_or_url {
        None => Ok(VersionSpecifiers::empty()),
        Some(VersionOrUrl::VersionSpecifier(specifiers)) => Ok(specifiers.clone()),
        Some(VersionOrUrl::Url(url)) => Err(Refusal::Invalid(format!(
            "{} @ {url}: packages come from the daemon's index by name and version, never from \
             a URL",
            requirement.name
        ))),
    }
}

fn check_met(
    name: &PackageName,
    specifiers: &VersionSpecifiers,
    version: &Version,
    place: &str,
    by: &Option<PackageName>,
) -> Result<(), Refusal> {
    if specifiers.contains(version) {
        return Ok(());
    }
    Err(Refusal::Conflict {
        message: format!(
            "{} needs {name}{specifiers}, and {place} has {name} {version}, which an install \
             does not replace",
            by.as_ref()
                .map_or("the request".to_owned(), |b| b.to_string()),
        ),
    })
}

/// Queues what `done` needs, with its extras, in this guest.
fn needs(done: &Chosen, guest: &Guest<'_>, queue: &mut VecDeque<Want>) {
    let extras: Vec<ExtraName> = done.extras.iter().cloned().collect();
    for requirement in &done.metadata.requires_dist {
        if requirement.evaluate_markers(guest.markers, &extras) {
            queue.push_back(Want {
                requirement: requirement.clone(),
                by: Some(done.planned.name.clone()),
            });
        }
    }
}

/// The newest version of `name` with a wheel that fits, fetched and read.
async fn choose(
    name: &PackageName,
    specifiers: &VersionSpecifiers,
    by: &Option<PackageName>,
    guest: &Guest<'_>,
    policy: &Policy,
    source: &impl Source,
) -> Result<Chosen, Refusal> {
    let files = source.files(name).await?;
    let (file, wheel) = pick(name, specifiers, &files, guest)?;
    let fetched = source.wheel(name, file, policy.max_wheel_bytes).await?;
    let bad = |why: String| Refusal::BadWheel {
        filename: file.filename.clone(),
        why,
    };
    let metadata = metadata::read(&fetched.bytes).map_err(bad)?;
    if metadata.name != wheel.name || metadata.version != wheel.version {
        return Err(bad(format!(
            "its METADATA says {} {}",
            metadata.name, metadata.version
        )));
    }
    if let Some(python) = &metadata.requires_python
        && !python.contains(guest.python)
    {
        return Err(bad(format!(
            "it needs Python {python}, and the guest has {}",
            guest.python
        )));
    }
    Ok(Chosen {
        planned: Planned {
            name: name.clone(),
            version: wheel.version,
            filename: file.filename.clone(),
            url: file.url.clone(),
            sha256: file.sha256.clone().unwrap_or_default(),
            bytes: fetched.bytes,
            cached: fetched.cached,
            needed_by: by.clone(),
        },
        metadata,
        extras: BTreeSet::new(),
    })
}

/// The file to install of those listed for `name`: a wheel with a hash that fits the guest, of
/// the newest version the specifiers and the guest's Python allow (pre-releases and yanked
/// files only when the specifiers name one exactly), the best fitting tags of that version.
fn pick<'f>(
    name: &PackageName,
    specifiers: &VersionSpecifiers,
    files: &'f [IndexFile],
    guest: &Guest<'_>,
) -> Result<(&'f IndexFile, WheelName), Refusal> {
    if files.is_empty() {
        return Err(Refusal::NotFound { name: name.clone() });
    }
    let wheels: Vec<(&IndexFile, WheelName)> = files
        .iter()
        .filter_map(|f| WheelName::parse(&f.filename).map(|w| (f, w)))
        .filter(|(_, w)| w.name == *name)
        .collect();
    let no_wheel = |why: String| Refusal::NoWheel {
        name: name.clone(),
        why,
    };
    if wheels.is_empty() {
        return Err(no_wheel(
            "the index has only source distributions of it, which would have to be built (its \
             code run); only wheels are installed"
                .to_owned(),
        ));
    }
    let fitting: Vec<(&IndexFile, WheelName, u32)> = wheels
        .into_iter()
        .filter_map(|(f, w)| w.fit(&guest.tags).map(|fit| (f, w, fit)))
        .filter(|(f, _, _)| f.sha256.is_some())
        .filter(|(f, _, _)| {
            f.requires_python
                .as_ref()
                .is_none_or(|p| p.contains(guest.python))
        })
        .collect();
    if fitting.is_empty() {
        return Err(no_wheel(format!(
            "none of its wheels (with a hash) is for {}",
            guest.tags.describe()
        )));
    }
    let pinned = specifiers
        .iter()
        .any(|s| matches!(s.operator(), Operator::Equal | Operator::ExactEqual));
    let pre = specifiers.iter().any(|s| s.any_prerelease());
    let best = fitting
        .iter()
        .filter(|(f, w, _)| {
            specifiers.contains(&w.version)
                && (pre || !w.version.any_prerelease())
                && (pinned || !f.yanked)
        })
        .max_by(|a, b| (&a.1.version, a.2).cmp(&(&b.1.version, b.2)));
    match best {
        Some((file, wheel, _)) => Ok((file, wheel.clone())),
        None => {
            let versions: BTreeSet<&Version> = fitting.iter().map(|(_, w, _)| &w.version).collect();
            let newest: Vec<String> = versions
                .iter()
                .rev()
                .take(5)
                .map(|v| v.to_string())
                .collect();
            let wanted = match specifiers.is_empty() {
                true => "a final release".to_owned(),
                false => specifiers.to_string(),
            };
            Err(no_wheel(format!(
                "no version with a fitting wheel matches {wanted} (the newest that fit: {})",
                newest.join(", ")
            )))
        }
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
