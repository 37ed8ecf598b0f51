//! Execs, plain and in a session: the program checked, the job built with the limits granted,
//! run within the caller's room, then audited, counted and logged.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tracing::info;

use super::code_policy::{self, CodePolicy};
use super::sessions::Audited;
use super::tools::{self, Declared};
use super::{Call, Refusal, Service, wire};
use crate::audit::{Code, ExecRecord};
use crate::egress::ExecContext;
use crate::egress::rules::Rule;
use crate::executor::Executor;
use crate::job::egress::Outbound;
use crate::job::files::FileChange;
use crate::job::tools::{ToolExchange, ToolResult};
use crate::job::{
    Env, ExecError, Files, Job, Language, Outcome, OutputChunk, OutputSink, SessionInfo, Status,
    files, panic_message,
};
use crate::telemetry::Attribute;

/// `run`'s result, or an internal error if it panicked: a fault in an executor is answered,
/// audited and counted like any job that did not run, not a connection closed without an
/// answer (a job's output sent before the panic stays sent).
async fn unwinding<T>(run: impl Future<Output = Result<T, ExecError>>) -> Result<T, ExecError> {
    AssertUnwindSafe(run)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| {
            Err(ExecError::Internal(format!(
                "the executor failed: {}",
                panic_message(&panic)
            )))
        })
}

/// What a request asks to run, whatever carried it.
#[derive(Debug)]
pub struct Program {
    /// The program's source.
    pub code: String,
    /// The time limit asked for; the default when None, capped at the maximum.
    pub timeout_ms: Option<u64>,
    /// The output cap asked for; the maximum when None, never above it.
    pub max_output_bytes: Option<usize>,
    /// What the program may not name, besides the daemon's default policy.
    pub policy: Option<CodePolicy>,
    /// Its working directory's files, decoded (their paths are checked here).
    pub files: Files,
    /// Where its output goes as it is written, besides the outcome. Required with tools: their
    /// calls go there too.
    pub output: Option<OutputSink>,
    /// The tools it may call (checked here), and its calls' timeout asked for.
    pub tools: Vec<Declared>,
    pub tool_timeout_ms: Option<u64>,
    /// What it may reach over HTTP, narrowing the daemon's rules; None: the daemon's.
    pub network: Option<Vec<Rule>>,
    /// Its environment variables (checked here); in a session, added to the session's.
    pub env: BTreeMap<String, String>,
    /// Packages to install before it runs (requirements), besides its `%pip install` lines.
    pub packages: Vec<String>,
}

impl Program {
    /// `code`, asking for nothing more: the daemon's defaults, no files, tools or output sink.
    pub fn new(code: impl Into<String>) -> Program {
        Program {
            code: code.into(),
            timeout_ms: None,
            max_output_bytes: None,
            policy: None,
            files: Files::new(),
            output: None,
            tools: Vec::new(),
            tool_timeout_ms: None,
            network: None,
            env: BTreeMap::new(),
            packages: Vec::new(),
        }
    }
}

/// A program that ran, however it ended, and how long it waited and ran.
#[derive(Debug)]
pub struct Executed {
    /// How it ended.
    pub outcome: Outcome,
    /// From the request's arrival to its program's start, in milliseconds.
    pub queued_ms: f64,
    /// How long the program ran, in milliseconds.
    pub duration_ms: f64,
}

impl<E: Executor> Service<E> {
    /// Runs `program` in a fresh `language` interpreter.
    pub async fn exec(
        &self,
        call: &Call,
        language: Language,
        mut program: Program,
    ) -> Result<Executed, Refusal> {
        self.taking_work()?;
        self.check_files(&program.files)?;
        let resolved = self.pip_lines(call, language, None, &mut program).await?;
        let job = self.job(call, language, program);
        self.run_installing(call, job, resolved, None).await.0
    }

    /// Runs `program` in `call`'s caller's session `id`.
    pub async fn session_exec(
        &self,
        call: &Call,
        id: &str,
        program: Program,
    ) -> Result<Executed, Refusal> {
        self.taking_work()?;
        self.check_files(&program.files)?;
        let (session, language) = self.executor.find_session(&call.caller.principal(), id)?;
        let mut program = program;
        let resolved = self
            .pip_lines(call, language, Some(id), &mut program)
            .await?;
        let job = self.job(call, language, program);
        let session = Some((id, session));
        self.run_installing(call, job, resolved, session).await.0
    }

    /// Makes `changes` to the files of `call`'s caller's session `id`, in order and all or
    /// none, after the execs that arrived before: an exec that runs no program, whose
    /// checkpoint (the number answered) is the session's state with its files changed.
    pub async fn change_session_files(
        &self,
        call: &Call,
        id: &str,
        changes: Vec<FileChange>,
    ) -> Result<u64, Refusal> {
        self.taking_work()?;
        for change in &changes {
            let paths = match change {
                FileChange::Write { path, .. } | FileChange::Remove { path } => [path, path],
                FileChange::Move { from, to } => [from, to],
            };
            for path in paths {
                given_path("changes", path)?;
            }
        }
        let (session, language) = self.executor.find_session(&call.caller.principal(), id)?;
        let mut job = self.job(call, language, Program::new(""))?;
        job.file_changes = changes;
        let outcome = self.run(call, job, Some((id, session))).await?.outcome;
        let checkpoint = made_checkpoint(outcome, "the session's files were not changed")?;
        let made = Audited {
            from: None,
            checkpoint: Some(checkpoint),
        };
        self.audit_session("session_files_changed", call, id, language, made);
        Ok(checkpoint)
    }

    /// Starts the interpreter of `call`'s caller's session `id` afresh, keeping its files,
    /// after the execs that arrived before: an exec that runs no program from the warm state,
    /// whose checkpoint holds the session's files and nothing of its programs' state. A
    /// rollback to the checkpoint before undoes it.
    pub async fn restart_session(&self, call: &Call, id: &str) -> Result<SessionInfo, Refusal> {
        self.taking_work()?;
        let owner = call.caller.principal();
        let (session, language) = self.executor.find_session(&owner, id)?;
        let mut job = self.job(call, language, Program::new(""))?;
        job.fresh_interpreter = true;
        let outcome = self.run(call, job, Some((id, session))).await?.outcome;
        let checkpoint = made_checkpoint(outcome, "the session was not restarted")?;
        let made = Audited {
            from: None,
            checkpoint: Some(checkpoint),
        };
        self.audit_session("session_restarted", call, id, language, made);
        // The session as it is once that state is saved (its checkpoint then the newest).
        let wait = self.limits.max_timeout;
        self.executor.session_checkpoints(&owner, id, wait).await?;
        Ok(self.executor.session(&owner, id)?)
    }

    /// The job for `program` (its files checked) in `language`: its size and policy checked,
    /// with the limits granted.
    pub(super) fn job(
        &self,
        call: &Call,
        language: Language,
        mut program: Program,
    ) -> Result<Job, Refusal> {
        let limits = &self.limits;
        if program.code.len() > limits.max_code_bytes {
            return Err(Refusal::CodeTooLarge {
                size: program.code.len(),
                limit: limits.max_code_bytes,
            });
        }
        if let Some(policy) = &program.policy {
            code_policy::validate(policy)
                .and_then(|()| code_policy::fits(policy, language))
                .map_err(|e| Refusal::InvalidRequest(e.to_string()))?;
        }
        let env = Env::new(std::mem::take(&mut program.env)).map_err(Refusal::InvalidRequest)?;
        let timeout = limits.timeout_for(program.timeout_ms);
        let policy = program.policy.as_ref();
        let tools = self.exchange(call, &program)?;
        let egress = self.outbound(call, program.network, program.output.clone())?;
        Ok(Job {
            request_id: call.id,
            language,
            code: program.code,
            max_output_bytes: limits.output_for(program.max_output_bytes),
            policy: code_policy::effective(&self.code_policy, policy, language),
            output: program.output,
            files: program.files,
            file_changes: Vec::new(),
            fresh_interpreter: false,
            packages: Vec::new(),
            file_limits: limits.files,
            env,
            timeout,
            deadline: call.received + timeout,
            span: call.span.clone(),
            trace: call.trace.clone(),
            caller: call.caller.clone(),
            tools,
            egress,
        })
    }

    /// The way out of a program that may reach what `network` allows (the daemon's rules when
    /// None); a request that asks for a network from a daemon that allows none is refused.
    fn outbound(
        &self,
        call: &Call,
        network: Option<Vec<Rule>>,
        watcher: Option<OutputSink>,
    ) -> Result<Option<Arc<dyn Outbound>>, Refusal> {
        let Some(egress) = &self.egress else {
            return match network {
                None => Ok(None),
                Some(_) => Err(Refusal::InvalidRequest(
                    "network: this daemon lets programs reach nothing over HTTP (it has no \
                     --egress-allow rule)"
                        .to_owned(),
                )),
            };
        };
        let rules = egress.narrow(network).map_err(Refusal::InvalidRequest)?;
        let context = ExecContext {
            request_id: call.id,
            caller: call.caller.clone(),
            watcher,
        };
        Ok(Some(egress.for_exec(rules, context)))
    }

    /// The exchange of `program`'s tool calls, if it declared tools: they are checked, and
    /// their calls go to its output's stream.
    fn exchange(
        &self,
        call: &Call,
        program: &Program,
    ) -> Result<Option<Arc<ToolExchange>>, Refusal> {
        if program.tools.is_empty() {
            return Ok(None);
        }
        let tools = tools::check(program.tools.clone()).map_err(Refusal::InvalidRequest)?;
        let Some(sink) = program.output.clone() else {
            return Err(Refusal::Exec(ExecError::Internal(
                "tools were declared, but the program's output goes nowhere".to_owned(),
            )));
        };
        let limits = self.limits.tools.for_request(program.tool_timeout_ms);
        let exchange = ToolExchange::new(tools, limits, sink, call.received);
        Ok(Some(Arc::new(exchange)))
    }

    /// Refuses files a working directory cannot hold: a path that is not a plain relative name,
    /// one given as a file and as a directory, or more than the caps.
    pub(super) fn check_files(&self, given: &Files) -> Result<(), Refusal> {
        for path in given.keys() {
            given_path("files", path)?;
        }
        if let Some((dir, path)) = files::clash(given) {
            return Err(Refusal::InvalidRequest(format!(
                "files: {dir:?} is given as a file and as the directory of {path:?}"
            )));
        }
        let limits = self.limits.files;
        files::check_fits(given, limits).map_err(|e| {
            let cap = files::cap_in_words(e, limits);
            Refusal::FilesOverCap(format!(
                "the request's files are more than a working directory may hold: at most {cap} \
                 (--max-files, --max-file-bytes)"
            ))
        })
    }

    /// Runs `job` (in `session`, when given) within its caller's room, and writes its audit
    /// line, metrics and log line.
    pub(super) async fn run(
        &self,
        call: &Call,
        job: Job,
        session: Option<(&str, E::Session)>,
    ) -> Result<Executed, Refusal> {
        let audit = &self.callers.audit;
        let code = audit.is_on().then(|| audit.code(&job.code));
        let language = job.language;
        let (id, session) = session.unzip();
        let exchange = job.tools.clone();
        let ran = match self.callers.quota.admit(&call.caller.principal(), language) {
            Ok(_slot) => {
                let _in_flight = self.metrics.in_flight();
                // Registered while it runs: the caller's answers to its calls find it.
                let _registered = exchange.as_ref().map(|exchange| {
                    let registered = self
                        .executions
                        .register(call.caller.principal(), exchange.clone());
                    if let Some(sink) = &job.output {
                        let _ = sink.send(OutputChunk::Started(registered.id().to_owned()));
                    }
                    registered
                });
                let ran = match session {
                    None => unwinding(self.executor.exec(job)).await,
                    Some(session) => unwinding(self.executor.exec_in_session(session, job)).await,
                };
                ran.map_err(Refusal::from)
            }
            Err(over) => Err(Refusal::from(over)),
        };
        let elapsed = call.received.elapsed();
        let (queued, duration) = times(call, &ran);
        let tools = exchange.map(|exchange| exchange.end());
        if let Some(tools) = &tools {
            self.metrics.record_tool_calls(language, tools);
        }
        if let Some(code) = &code {
            let mut record = record(call, language, id, code, &ran, (queued, duration));
            record.tool_calls = tools.as_ref().map(|t| &t.calls);
            audit.exec(&record);
        }
        let outcome = ran?;
        call.trace.set(|| {
            let mut attributes = vec![
                Attribute::new("hyperlightd.language", language.as_str()),
                Attribute::new("hyperlightd.exec.status", outcome.status.as_str()),
            ];
            if let Some(error) = &outcome.error {
                let kind = wire::error_kind(error.kind).as_str();
                attributes.push(Attribute::new("hyperlightd.exec.error", kind));
            }
            if let Some(session) = &outcome.session {
                attributes.push(Attribute::new("hyperlightd.session.id", session.id.clone()));
                let checkpoint = i64::try_from(session.checkpoint).unwrap_or(i64::MAX);
                attributes.push(Attribute::new("hyperlightd.session.checkpoint", checkpoint));
            }
            attributes
        });
        self.metrics
            .record_execution(language, outcome.status, elapsed);
        let _entered = call.span.enter();
        info!(
            %language,
            status = outcome.status.as_str(),
            queued_ms = ms(queued),
            duration_ms = ms(duration),
            "executed"
        );
        Ok(Executed {
            outcome,
            queued_ms: ms(queued),
            duration_ms: ms(duration),
        })
    }
}

/// Refuses a path a caller gave (under `field` of the request) that is not a plain relative
/// name the working directory allows.
fn given_path(field: &str, path: &str) -> Result<(), Refusal> {
    files::check_given(path).map_err(|e| {
        Refusal::InvalidRequest(format!(
            "{field}: {path:?} is not a path the working directory allows ({e}): give a \
             relative path of plain names joined by '/' (no '.', '..', empty names, leading \
             '/' or control characters)"
        ))
    })
}

/// How long a request waited before its program started, and how long the program ran. A
/// refused request waited until its refusal, and ran for no time.
fn times(call: &Call, ran: &Result<Outcome, Refusal>) -> (Duration, Duration) {
    match ran {
        Ok(outcome) => (
            outcome.started.saturating_duration_since(call.received),
            outcome.ran,
        ),
        Err(_) => (call.received.elapsed(), Duration::ZERO),
    }
}

/// `duration` in milliseconds, to the microsecond.
fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// The audit line of a job that `ran` (or was refused).
fn record<'a>(
    call: &Call,
    language: Language,
    session: Option<&'a str>,
    code: &'a Code,
    ran: &'a Result<Outcome, Refusal>,
    (queued, duration): (Duration, Duration),
) -> ExecRecord<'a> {
    let (status, error_kind, output_bytes, truncated) = match ran {
        Ok(outcome) => (
            outcome.status.as_str(),
            outcome.error.as_ref().map(|e| wire::error_kind(e.kind)),
            outcome.stdout.len() + outcome.stderr.len(),
            outcome.truncated,
        ),
        Err(refused) => ("rejected", Some(refused.kind()), 0, false),
    };
    let checkpoint = ran
        .as_ref()
        .ok()
        .and_then(|outcome| Some(outcome.session.as_ref()?.checkpoint));
    ExecRecord {
        request_id: call.id,
        caller: call.caller.clone(),
        language,
        session,
        checkpoint,
        code,
        status,
        error_kind,
        duration_ms: ms(duration),
        queued_ms: ms(queued),
        output_bytes,
        truncated,
        tool_calls: None,
        trace_id: call.trace.trace_id(),
    }
}

impl<E: Executor> Service<E> {
    /// `call`'s caller answers call `id` of its execution `execution`.
    pub fn answer_tool(
        &self,
        call: &Call,
        execution: &str,
        id: &str,
        result: ToolResult,
    ) -> Result<(), Refusal> {
        self.executions
            .answer(&call.caller.principal(), execution, id, result)
            .map_err(Refusal::from)
    }
}

/// The checkpoint an exec that runs no program made, or why it made none (`what` did not
/// happen).
pub(super) fn made_checkpoint(outcome: Outcome, what: &str) -> Result<u64, Refusal> {
    match (&outcome.session, outcome.status) {
        (Some(session), Status::Ok) if !session.rolled_back => Ok(session.checkpoint),
        _ => Err(Refusal::Exec(ExecError::Internal(format!(
            "{what}: saving the state failed ({})",
            outcome
                .error
                .map_or_else(|| "no error told".to_owned(), |e| e.message)
        )))),
    }
}
