//! Installs: a session's through the API, and the `%pip install` lines of a Python program
//! (in a session or not). The host resolves and fetches (`packages/`); the wheels go with an
//! exec of the session's own lifecycle, installed before its program runs: by the guest into
//! its memory (native), or by the host into the working directory (WebAssembly, as file
//! changes). Each install is one audit line and a count by outcome.

use super::exec::made_checkpoint;
use super::{Call, Program, Refusal, Service};
use crate::audit::{InstallRecord, PackageLine};
use crate::executor::Executor;
use crate::job::files::FileChange;
use crate::job::packages::Wheel;
use crate::job::{FailureKind, Job, Language, Outcome};
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
    plan: Plan,
    site: Site,
    before: Vec<InstalledPackage>,
}

impl Resolved {
    /// Puts the wheels on `job` (of a session's exec when `in_session`): for the guest to
    /// unpack, or unpacked here into its working directory, with the session's manifest.
    pub(super) fn give(&self, job: &mut Job, in_session: bool) -> Result<(), Refusal> {
        if self.site == Site::Guest {
            job.packages = wheels(&self.plan);
            return Ok(());
        }
        for planned in &self.plan.install {
            let files =
                unpack::files(&planned.bytes).map_err(|why| packages::Refusal::BadWheel {
                    filename: planned.filename.clone(),
                    why,
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
        let plan = &resolved.plan;
        if plan.install.is_empty() {
            // The session's newest checkpoint, once the execs before have saved theirs.
            let wait = self.limits.max_timeout;
            let checkpoints = self.executor.session_checkpoints(&owner, id, wait).await?;
            let checkpoint = checkpoints.last().map_or(0, |c| c.number);
            self.audit_install(call, Some(id), &requirements, plan, Ok(()));
            return Ok(Installed {
                plan: resolved.plan,
                checkpoint,
            });
        }
        let ended = |refused: &Refusal| Err((refused.reason(), refused.to_string()));
        let mut program = Program::new("");
        program.timeout_ms = timeout_ms;
        let mut job = self.job(call, language, program)?;
        let given = resolved.give(&mut job, true);
        let ran = match given {
            Ok(()) => self.run(call, job, Some((id, session))).await,
            Err(refused) => Err(refused),
        };
        let outcome = match ran {
            Ok(executed) => executed.outcome,
            Err(refused) => {
                self.audit_install(call, Some(id), &requirements, plan, ended(&refused));
                return Err(refused);
            }
        };
        if let Some(failed) = install_failure(&outcome) {
            let refused = Refusal::from(packages::Refusal::Failed(failed));
            self.audit_install(call, Some(id), &requirements, plan, ended(&refused));
            return Err(refused);
        }
        let checkpoint = made_checkpoint(outcome, "the packages were not installed")?;
        self.audit_install(call, Some(id), &requirements, plan, Ok(()));
        Ok(Installed {
            plan: resolved.plan,
            checkpoint,
        })
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
        self.audit_install(call, session, &requirements, &resolved.plan, Ok(()));
        Ok(Some(resolved))
    }

    /// Says how a program's install ended, once its exec did: a failure in the sandbox is
    /// counted and audited (the exec's own answer tells the caller).
    pub(super) fn installed_with(&self, call: &Call, session: Option<&str>, outcome: &Outcome) {
        if let Some(failed) = install_failure(outcome) {
            let ended = Err(("install_failed", failed));
            self.audit_install(call, session, &[], &Plan::default(), ended);
        }
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
        let before = match session {
            None => Vec::new(),
            Some(id) => self.installed_in(call, id).await?,
        };
        let plan = installs.plan(requirements, &runtime, &before).await?;
        Ok(Resolved {
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
        let health = self.executor.health();
        let runtime = health.runtimes.get(&language);
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

/// Why an exec's install failed in its sandbox, if it did.
fn install_failure(outcome: &Outcome) -> Option<String> {
    let error = outcome.error.as_ref()?;
    (error.kind == FailureKind::InstallFailed).then(|| error.message.clone())
}
