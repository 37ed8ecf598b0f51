//! Packages installed at runtime in Python sessions: resolved, fetched and checked by the host,
//! unpacked by the guest where its state lives. Off unless the operator names an index.
//!
//! - [`options`]: the daemon's options, read into [`Packages`];
//! - [`pip`]: the requirements a caller names, and the `%pip install` lines of a program;
//! - [`resolve`]: requirements to wheels, dependencies included, what is there kept;
//! - [`wheel`]: a wheel's name and tags, and whether the guest can run it;
//! - [`index`]: a project's page of a simple repository index (JSON or HTML);
//! - [`metadata`]: a wheel's METADATA;
//! - [`fetch`]: the indexes and the cache as the resolution's source;
//! - [`unpack`]: a pure wheel's files, for a guest whose packages live in its files;
//! - [`cache`]: wheels on the host by their SHA-256;
//! - [`policy`]: names allowed and denied, sizes.
//!
//! # Design: the host fetches, the guest unpacks
//! The guest has no network, and that stays so: an install is the host's work, as outbound HTTP
//! is. The service reads the requirements (the API's list, or the `%pip install` lines it takes
//! out of a program), and [`Packages::plan`] resolves them against what the runtime has (its
//! packages, reported by the guest when the template was made) and what the session installed
//! before (the manifest the runner keeps in the session's files, `.hyperlightd/packages.json`):
//! each requirement in turn, the newest version with a wheel that fits the guest, its own
//! requirements queued after it. What is there is never replaced; a requirement it does not
//! satisfy is a conflict, refused. Only wheels are taken (a source distribution would have to be
//! built, running its code on the host), only with a SHA-256 listed by the index, checked on the
//! bytes fetched; nothing of a package runs on the host, and the METADATA is the only file the
//! host reads in it.
//!
//! The wheels go to the guest with the job (`Job::packages`), through the same session
//! lifecycle as any exec: the runner unpacks them into a staging directory, moves them into its
//! site directory only when every one unpacked, records them in the manifest, and only then runs
//! the program. So an install is kept where the session's state is (the native guest's memory),
//! in its next checkpoint: rolled back with it, forked with it, written to disk with it. An
//! install that fails in the guest leaves the session as it was (its exec saves nothing).
//!
//! The WebAssembly guest keeps no file of its own between execs: its session's state includes
//! its working directory, which the host holds. There the host unpacks pure wheels itself
//! ([`unpack`], into `.hyperlightd/site-packages`, which its runner puts on `sys.path`) as file
//! changes of the exec, manifest included: all or none, within the directory's caps, kept with
//! the session's files.
//!
//! Every request to an index goes through the egress client (TLS verified, one connection per
//! request, the response's size bounded). The index's own host is the operator's choice, reached
//! by name whatever its address (a mirror on a private network); any other host a page sends
//! files from must resolve to public addresses only. Pages are kept for `--package-page-max-age-s`,
//! wheels in the cache by hash: a second install of the same package asks the index nothing.

pub mod cache;
pub mod fetch;
#[cfg(test)]
mod fuzz;
pub mod index;
pub mod metadata;
pub mod options;
pub mod pip;
pub mod policy;
mod refusal;
pub mod resolve;
pub mod unpack;
pub mod wheel;

#[cfg(test)]
pub mod testing;

use std::collections::BTreeMap;
use std::str::FromStr;

use hyperlightd_api::PackagesHealth;
use pep508_rs::pep440_rs::Version;
use pep508_rs::{MarkerEnvironment, MarkerEnvironmentBuilder, PackageName};
use serde::{Deserialize, Serialize};

use self::fetch::{Asking, Hops, Indexes};
use self::policy::Policy;
pub use self::refusal::Refusal;
use self::resolve::{Guest, Installed, Place, Plan};
use self::wheel::GuestTags;
use crate::metrics::PackageMetrics;

/// Where the runner keeps what a session installed, in its working directory.
pub const MANIFEST: &str = ".hyperlightd/packages.json";

/// One package a session installed, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledPackage {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// The manifest's packages; a manifest that does not read (a program may have written it)
/// counts as none.
pub fn read_manifest(bytes: Option<&[u8]>) -> Vec<InstalledPackage> {
    bytes
        .and_then(|bytes| serde_json::from_slice(bytes).ok())
        .unwrap_or_default()
}

/// The session's manifest listing `packages`, as the runners write it.
pub fn manifest(packages: &[InstalledPackage]) -> Vec<u8> {
    serde_json::to_vec_pretty(packages).unwrap_or_default()
}

/// The runtime an install is for: what the guest runs wheels with, its Python and its own
/// packages, and where installed packages live.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub tags: GuestTags,
    /// CPython's full version (`3.11.2`).
    pub python: String,
    pub packages: BTreeMap<String, String>,
    /// Where they live: the guest's own memory, where its runner unpacks the wheels (the
    /// native guest); or the session's working directory, where the host unpacks them
    /// (`unpack::SITE`, the WebAssembly guest's).
    pub site: Site,
}

/// Where a runtime's installed packages live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    Guest,
    WorkingDirectory,
}

/// The daemon's installs: its indexes and cache, and what may be installed.
#[derive(Debug)]
pub struct Packages {
    indexes: Indexes,
    policy: Policy,
    metrics: Option<PackageMetrics>,
}

impl Packages {
    pub fn new(indexes: Indexes, policy: Policy, metrics: Option<PackageMetrics>) -> Packages {
        Packages {
            indexes,
            policy,
            metrics,
        }
    }

    /// The wheels that install `requirements` in `runtime`, beside what the session has; each
    /// request to an index is told to `hops`.
    pub async fn plan(
        &self,
        requirements: &[String],
        runtime: &Runtime,
        session: &[InstalledPackage],
        hops: Hops<'_>,
    ) -> Result<Plan, Refusal> {
        let requirements = pip::requirements(requirements)?;
        let python = Version::from_str(&runtime.python).map_err(|e| {
            Refusal::Unsupported(format!("the guest's Python {:?}: {e}", runtime.python))
        })?;
        let markers = markers(&python)?;
        let installed = installed(runtime, session);
        let guest = Guest {
            tags: runtime.tags,
            markers: &markers,
            python: &python,
            installed: &installed,
        };
        let asking = Asking {
            indexes: &self.indexes,
            hops,
        };
        let planned = resolve::resolve(requirements, &guest, &self.policy, &asking).await;
        self.count(&planned);
        planned
    }

    fn count(&self, planned: &Result<Plan, Refusal>) {
        let fetched = self.indexes.take_counts();
        let Some(metrics) = &self.metrics else {
            return;
        };
        metrics.index_requests.inc_by(fetched.requests);
        metrics.fetched_bytes.inc_by(fetched.bytes);
        if let Ok(plan) = planned {
            let hits = plan.install.iter().filter(|p| p.cached).count();
            metrics.cache_hits.inc_by(hits as u64);
        }
    }

    /// Counts an install that ended `outcome` (`installed`, or a refusal's reason).
    pub fn record(&self, outcome: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.installs.with_label_values(&[outcome]).inc();
        }
    }

    /// What `/v1/health` says of installs.
    pub fn health(&self) -> PackagesHealth {
        PackagesHealth {
            indexes: self.indexes.roots(),
            allow: self.policy.allow.iter().map(ToString::to_string).collect(),
            deny: self.policy.deny.iter().map(ToString::to_string).collect(),
            max_wheel_bytes: self.policy.max_wheel_bytes,
            max_per_session: self.policy.max_per_session as u32,
            cache_dir: self.indexes.cache.dir().display().to_string(),
            cache_bytes: self.indexes.cache.bytes(),
            cache_max_bytes: self.indexes.cache.max_bytes(),
        }
    }
}

/// The runtime's packages and the session's, by normalized name.
fn installed(runtime: &Runtime, session: &[InstalledPackage]) -> Installed {
    let runtime_packages = runtime
        .packages
        .iter()
        .map(|(name, version)| (name, version, Place::Runtime));
    let session_packages = session
        .iter()
        .map(|p| (&p.name, &p.version, Place::Session));
    runtime_packages
        .chain(session_packages)
        .filter_map(|(name, version, place)| {
            let name = PackageName::from_str(name).ok()?;
            let version = Version::from_str(version).ok()?;
            Some((name, (version, place)))
        })
        .collect()
}

/// The environment markers of a CPython `python` on Linux x86_64.
pub(crate) fn markers(python: &Version) -> Result<MarkerEnvironment, Refusal> {
    let release = python.release();
    let short = format!(
        "{}.{}",
        release.first().copied().unwrap_or(3),
        release.get(1).copied().unwrap_or(0)
    );
    let full = python.to_string();
    MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
        implementation_name: "cpython",
        implementation_version: &full,
        os_name: "posix",
        platform_machine: "x86_64",
        platform_python_implementation: "CPython",
        platform_release: "",
        platform_system: "Linux",
        platform_version: "",
        python_full_version: &full,
        python_version: &short,
        sys_platform: "linux",
    })
    .map_err(|e| Refusal::Unsupported(format!("the guest's Python {full}: {e}")))
}
