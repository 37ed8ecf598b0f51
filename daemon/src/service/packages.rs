//! Installs: a session's through the API, and the `%pip install` lines of a Python program
//! (in a session or not). The host resolves and fetches (`packages/`); the wheels go with an
//! exec of the session's own lifecycle, installed before its program runs: by the guest into
//! its memory (native), or by the host into the working directory (WebAssembly, as file
//! changes). Each install is one audit line and a count by outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::OwnedMutexGuard;

use super::exec::Executed;
use super::exec::made_checkpoint;
use super::{Call, Program, Refusal, Service};
use crate::audit::{EgressRecord, InstallRecord, PackageLine};
use crate::executor::Executor;
use crate::job::files::FileChange;
use crate::job::packages::Wheel;
use crate::job::{FailureKind, Job, Language, Outcome, SessionInfo};
use crate::packages::fetch::IndexHop;
use crate::packages::resolve::Plan;
use crate::packages::wheel::GuestTags;
use crate::packages::{self, InstalledPackage, MANIFEST, Runtime, Site, unpack};

/// An install made in a session: what it planned, and the checkpoint it left.
#[derive(Debug)]
pub struct Installed {
    pub plan: Plan,
    pub checkpoint: u64,
}

/// What an install resolved: the wheels, where the runtime keeps them, and what the session
/// had installed before.
#[derive(Debug)]
pub(super) struct Resolved {
    /// The session's turn to install, held until the exec that installs has ended.
    _turn: Option<OwnedMutexGuard<()>>,
    requirements: Vec<String>,
    plan: Plan,
    site: Site,
    before: Vec<InstalledPackage>,
}

impl Resolved {
    /// Puts the wheels on `job` (of a session's exec when `in_session`): for the guest to
    /// unpack, or unpacked here into its working directory, with the session's manifest.
    /// At most `max_bytes` are unpacked in all (a working directory's bound).
    pub(super) fn give(
        &self,
        job: &mut Job,
        in_session: bool,
        max_bytes: u64,
    ) -> Result<(), Refusal> {
        if self.site == Site::Guest {
            job.packages = wheels(&self.plan);
            return Ok(());
        }
        let mut left = max_bytes;
        for planned in &self.plan.install {
            let files = unpack::files(&planned.bytes, &mut left).map_err(|why| {
                packages::Refusal::BadWheel {
                    filename: planned.filename.clone(),
                    why,
                }
            })?;
            for (path, bytes) in files {
                match in_session {
                    true => job.file_changes.push(FileChange::Write { path, bytes }),
                    false => drop(job.files.insert(path, bytes)),
                }
            }
        }
        if in_session {
            let mut listed = self.before.clone();
            listed.extend(self.plan.install.iter().map(|p| InstalledPackage {
                name: p.name.to_string(),
                version: p.version.to_string(),
                sha256: p.sha256.clone(),
            }));
            let bytes = packages::manifest(&listed);
            job.file_changes.push(FileChange::Write {
                path: MANIFEST.to_owned(),
                bytes,
            });
        }
        Ok(())
    }
}

/// One install at a time in each session, from its resolution to the end of the exec that
/// installs: each resolves against what the one before installed, so that two cannot both
/// pass against the same state and then overwrite each other's packages or manifest.
#[derive(Debug, Default)]
pub(super) struct Installing {
    sessions: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Installing {
    /// Session `id`'s turn, once the install before it has ended.
    async fn turn(&self, id: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            sessions.retain(|_, lock| lock.strong_count() > 0);
            match sessions.get(id).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    sessions.insert(id.to_owned(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

impl<E: Executor> Service<E> {
    /// Installs `requirements` (with what they need) in `call`'s caller's session `id`, after
    /// the execs that arrived before.
    pub async fn install_packages(
        &self,
        call: &Call,
        id: &str,
        requirements: Vec<String>,
        timeout_ms: Option<u64>,
    ) -> Result<Installed, Refusal> {
        self.taking_work()?;
        let owner = call.caller.principal();
        let (session, language) = self.executor.find_session(&owner, id)?;
        let resolved = self.plan(call, language, Some(id), &requirements).await?;
        if resolved.plan.install.is_empty() {
            // The session's newest checkpoint, once the execs before have saved theirs.
            let wait = self.limits.max_timeout;
            let checkpoints = self.executor.session_checkpoints(&owner, id, wait).await?;
            let checkpoint = checkpoints.last().map_or(0, |c| c.number);
            let (requirements, plan) = (&resolved.requirements, &resolved.plan);
            self.audit_install(call, Some(id), requirements, plan, Ok(()));
            return Ok(Installed {
                plan: resolved.plan,
                checkpoint,
            });
        }
        let mut program = Program::new("");
        program.timeout_ms = timeout_ms;
        let job = self.job(call, language, program);
        let (ran, resolved) = self
            .run_installing(call, job, Some(resolved), Some((id, session)))
            .await;
        let outcome = ran?.outcome;
        if let Some(failed) = install_failure(&outcome) {
            return Err(packages::Refusal::Failed(failed).into());
        }
        let checkpoint = made_checkpoint(outcome, "the packages were not installed")?;
        let plan = resolved.map(|r| r.plan).unwrap_or_default();
        Ok(Installed { plan, checkpoint })
    }

    /// Runs `job` (in `session`, if any) with the wheels `resolved` plans, installed before
    /// its program; the install is audited and counted once the exec has ended, by how it
    /// ended. Gives back the plan for the caller's answer.
    pub(super) async fn run_installing(
        &self,
        call: &Call,
        job: Result<Job, Refusal>,
        resolved: Option<Resolved>,
        session: Option<(&str, E::Session)>,
    ) -> (Result<Executed, Refusal>, Option<Resolved>) {
        let id = session.as_ref().map(|(id, _)| *id);
        let given = job.and_then(|mut job| {
            if let Some(resolved) = &resolved {
                resolved.give(&mut job, id.is_some(), self.limits.files.max_bytes)?;
                if id.is_none() {
                    // Unpacked into its working directory, they count against its caps.
                    self.check_files(&job.files)?;
                }
            }
            Ok(job)
        });
        let ran = match given {
            Ok(job) => self.run(call, job, session).await,
            Err(refused) => Err(refused),
        };
        if let Some(resolved) = &resolved {
            let ended = match &ran {
                Err(refused) => Err((refused.reason(), refused.to_string())),
                Ok(executed) => match install_failure(&executed.outcome) {
                    Some(failed) => Err(("install_failed", failed)),
                    None if dropped(&executed.outcome) => Err((
                        "not_kept",
                        "the exec's effects were dropped, the install with them".to_owned(),
                    )),
                    None => Ok(()),
                },
            };
            let (requirements, plan) = (&resolved.requirements, &resolved.plan);
            self.audit_install(call, id, requirements, plan, ended);
        }
        (ran, resolved)
    }

    /// What `call`'s caller's session `id` installed, as its newest checkpoint has it (after
    /// the execs that arrived before).
    pub async fn session_packages(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<Vec<InstalledPackage>, Refusal> {
        self.installed_in(call, id).await
    }

    /// `call`'s caller's session `id`, with what it installed at its newest checkpoint (not
    /// waiting for an exec in flight). A session whose files cannot be read (lost, or a
    /// checkpoint on disk refused) lists none; the refusal is logged where it happened.
    pub async fn session_detail(
        &self,
        call: &Call,
        id: &str,
    ) -> Result<(SessionInfo, Vec<InstalledPackage>), Refusal> {
        let info = self.session(call, id)?;
        let owner = call.caller.principal();
        let wait = self.limits.max_timeout;
        let files = self.executor.session_head_files(&owner, id, wait).await;
        let installed = match files {
            Ok(files) => packages::read_manifest(files.get(MANIFEST).map(|f| &f[..])),
            Err(_) => Vec::new(),
        };
        Ok((info, installed))
    }

    /// Takes the `%pip install` lines out of a Python `program` (in session `session`, if
    /// any) and resolves them with the packages it names: the wheels its job installs before
    /// the rest of it runs (None when it asks for none).
    pub(super) async fn pip_lines(
        &self,
        call: &Call,
        language: Language,
        session: Option<&str>,
        program: &mut Program,
    ) -> Result<Option<Resolved>, Refusal> {
        let mut requirements = std::mem::take(&mut program.packages);
        if language != Language::Python {
            if requirements.is_empty() {
                return Ok(None);
            }
            let why = format!("packages are installed in Python sessions only, not in {language}");
            let refused = packages::Refusal::Unsupported(why).into();
            return Err(self.refused(call, session, &requirements, refused));
        }
        let split = match packages::pip::split(&program.code) {
            Ok(split) => split,
            Err(refused) => return Err(self.refused(call, session, &[], refused.into())),
        };
        if let Some(split) = split {
            program.code = split.code;
            requirements.extend(split.requirements);
        }
        if requirements.is_empty() {
            return Ok(None);
        }
        let resolved = self.plan(call, language, session, &requirements).await?;
        Ok(Some(resolved))
    }

    /// The wheels that install `requirements` in `language`'s runtime, beside what session
    /// `session` installed before; a refusal is audited and counted.
    async fn plan(
        &self,
        call: &Call,
        language: Language,
        session: Option<&str>,
        requirements: &[String],
    ) -> Result<Resolved, Refusal> {
        let planned = self
            .plan_unaudited(call, language, session, requirements)
            .await;
        planned.map_err(|refused| self.refused(call, session, requirements, refused))
    }

    async fn plan_unaudited(
        &self,
        call: &Call,
        language: Language,
        session: Option<&str>,
        requirements: &[String],
    ) -> Result<Resolved, Refusal> {
        let Some(installs) = &self.packages else {
            return Err(packages::Refusal::Off.into());
        };
        let runtime = self.runtime(language)?;
        let (turn, before) = match session {
            None => (None, Vec::new()),
            Some(id) => {
                let turn = self.installing.turn(id).await;
                (Some(turn), self.installed_in(call, id).await?)
            }
        };
        let audit = &self.callers.audit;
        let hops = |hop: &IndexHop<'_>| {
            let host = hop.target.host_text();
            audit.egress(&index_line(call, hop, &host));
        };
        let plan = installs
            .plan(requirements, &runtime, &before, &hops)
            .await?;
        Ok(Resolved {
            _turn: turn,
            requirements: requirements.to_vec(),
            plan,
            site: runtime.site,
            before,
        })
    }

    /// What session `id` installed, from its manifest.
    async fn installed_in(&self, call: &Call, id: &str) -> Result<Vec<InstalledPackage>, Refusal> {
        let files = self.session_files(call, id).await?;
        Ok(packages::read_manifest(files.get(MANIFEST).map(|f| &f[..])))
    }

    /// What `language`'s guest installs wheels with.
    fn runtime(&self, language: Language) -> Result<Runtime, packages::Refusal> {
        let runtime = self.executor.runtime(language);
        let runtime = runtime.as_ref();
        let python = runtime.and_then(|r| r.version.clone()).unwrap_or_default();
        let (tags, site) = match runtime.map(|r| r.name) {
            _ if language != Language::Python => {
                return Err(packages::Refusal::Unsupported(format!(
                    "packages are installed in Python sessions only, not in {language}"
                )));
            }
            Some("native") => (GuestTags::NATIVE, Site::Guest),
            // Pure Python only, for its CPython, into the working directory.
            _ => {
                let minor = python.split('.').nth(1).and_then(|m| m.parse().ok());
                let minor = minor.unwrap_or(GuestTags::NATIVE.minor);
                let tags = GuestTags { minor, glibc: None };
                (tags, Site::WorkingDirectory)
            }
        };
        Ok(Runtime {
            tags,
            python,
            packages: runtime.map(|r| r.packages.clone()).unwrap_or_default(),
            site,
        })
    }

    /// `refused`, once its install is audited and counted.
    pub(super) fn refused(
        &self,
        call: &Call,
        session: Option<&str>,
        requirements: &[String],
        refused: Refusal,
    ) -> Refusal {
        let ended = Err((refused.reason(), refused.to_string()));
        self.audit_install(call, session, requirements, &Plan::default(), ended);
        refused
    }

    /// Writes an install's audit line and counts it: it `ended` well, or for a reason, told
    /// the caller as a message.
    fn audit_install(
        &self,
        call: &Call,
        session: Option<&str>,
        requirements: &[String],
        plan: &Plan,
        ended: Result<(), (&str, String)>,
    ) {
        let (outcome, error) = match ended {
            Ok(()) if plan.install.is_empty() => ("present", None),
            Ok(()) => ("installed", None),
            Err((reason, message)) => (reason, Some(message)),
        };
        if let Some(installs) = &self.packages {
            installs.record(outcome);
        }
        let packages = plan
            .install
            .iter()
            .map(|p| PackageLine {
                name: p.name.to_string(),
                version: p.version.to_string(),
                sha256: p.sha256.clone(),
                source: if p.cached {
                    "cache".to_owned()
                } else {
                    p.url.clone()
                },
            })
            .collect();
        let line = InstallRecord {
            request_id: call.id,
            caller: call.caller.clone(),
            session,
            requirements,
            packages,
            outcome,
            error,
        };
        self.callers.audit.install(&line);
    }
}

/// The `egress` audit line of a request an install of `call`'s made to an index.
fn index_line<'a>(call: &Call, hop: &'a IndexHop<'a>, host: &'a str) -> EgressRecord<'a> {
    let target = hop.target;
    EgressRecord {
        request_id: call.id,
        caller: call.caller.clone(),
        method: "GET",
        scheme: Some(target.scheme.as_str()),
        host: Some(host),
        port: Some(target.port),
        path: Some(&target.path),
        redirect: hop.redirect,
        status: hop.status,
        bytes_sent: 0,
        bytes_received: hop.received,
        duration_ms: hop.elapsed.as_secs_f64() * 1e3,
        error_kind: hop.failed.map(|(kind, _)| kind),
        error: hop.failed.map(|(_, message)| message),
    }
}

/// The wheels of `plan`, for a job.
fn wheels(plan: &Plan) -> Vec<Wheel> {
    plan.install
        .iter()
        .map(|p| Wheel {
            name: p.name.to_string(),
            version: p.version.to_string(),
            filename: p.filename.clone(),
            sha256: p.sha256.clone(),
            bytes: p.bytes.clone(),
        })
        .collect()
}

/// Whether an exec's effects were dropped (its session rolled back), so that nothing it
/// installed was kept.
fn dropped(outcome: &Outcome) -> bool {
    outcome.session.as_ref().is_some_and(|s| s.rolled_back)
}

/// Why an exec's install failed in its sandbox, if it did.
fn install_failure(outcome: &Outcome) -> Option<String> {
    let error = outcome.error.as_ref()?;
    (error.kind == FailureKind::InstallFailed).then(|| error.message.clone())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_session_installs_one_at_a_time_and_others_do_not_wait() {
        let installing = Installing::default();
        let first = installing.turn("a").await;
        let wait = Duration::from_secs(1);
        let second = tokio::time::timeout(wait, installing.turn("a")).await;
        assert!(second.is_err(), "a second install began during the first");
        let other = tokio::time::timeout(wait, installing.turn("b")).await;
        assert!(other.is_ok(), "another session waited");
        drop(other);
        drop(first);
        let next = tokio::time::timeout(wait, installing.turn("a")).await;
        assert!(
            next.is_ok(),
            "the next install did not begin after the first"
        );
        drop(next);
        drop(installing.turn("c").await);
        let held = installing.sessions.lock().unwrap().len();
        assert_eq!(held, 1, "ended turns are forgotten");
    }
}
