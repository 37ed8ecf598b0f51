//! The one place where the core's types become the API's wire types, and the other way: each
//! mapping an exhaustive `match` or a whole struct, so that a new variant or field must be
//! decided here.

use super::code_policy::CodePolicy;
use super::tools::Declared;
use super::{Executed, Program, Refusal};
use crate::job::files::FileChange;
use crate::job::tools::{ToolCall, ToolResult};
use std::collections::BTreeMap;
use std::time::SystemTime;

use hyperlightd_api as api;

use crate::job::{
    CheckpointInfo, Display, Failure, FailureKind, Files, Language, Loss, OutputChunk, PoolCounts,
    Runtime, SessionCounts, SessionInfo, SessionRef, SessionSettings, Status, Stream,
};

/// The program a request asks to run (`POST /v1/exec` and a session's exec carry the same
/// fields), its files decoded, and whether it is answered as a stream (asked for, or tools
/// declared, whose calls travel in it).
pub fn program(exec: api::ExecRequest) -> Result<(bool, Program), Refusal> {
    let stream = exec.stream || !exec.tools.is_empty();
    let program = Program {
        code: exec.code,
        timeout_ms: exec.timeout_ms,
        max_output_bytes: exec.max_output_bytes,
        policy: exec.policy.map(CodePolicy::from),
        files: request_files(exec.files)?,
        output: None,
        tools: exec.tools.into_iter().map(declared).collect(),
        tool_timeout_ms: exec.tool_timeout_ms,
        network: exec
            .network
            .map(|network| crate::egress::options::rules_of(&network.allow))
            .transpose()
            .map_err(Refusal::InvalidRequest)?,
        env: exec.env,
        packages: exec.packages,
    };
    Ok((stream, program))
}

/// A request's files as bytes, by path: text as it is, base64 decoded.
pub fn request_files(given: api::FileMap) -> Result<Files, Refusal> {
    given
        .into_iter()
        .map(|(path, data)| {
            let bytes = bytes_of("files", &path, &data)?;
            Ok((path, bytes))
        })
        .collect()
}

/// A change asked of a session's files, its bytes decoded.
pub fn file_change(change: api::FileChange) -> Result<FileChange, Refusal> {
    Ok(match change {
        api::FileChange::Write { path, data } => FileChange::Write {
            bytes: bytes_of("changes", &path, &data)?,
            path,
        },
        api::FileChange::Remove { path } => FileChange::Remove { path },
        api::FileChange::Move { from, to } => FileChange::Move { from, to },
    })
}

/// One file's bytes; bad base64 is the request's fault, named by the field and path.
fn bytes_of(field: &str, path: &str, data: &api::FileData) -> Result<Vec<u8>, Refusal> {
    data.to_bytes()
        .map_err(|why| Refusal::InvalidRequest(format!("{field}: {path:?}: {why}")))
}

/// A working directory's files, by path, with their sizes.
pub fn file_list(files: &Files) -> api::FileList {
    api::FileList {
        files: files
            .iter()
            .map(|(path, bytes)| api::FileInfo {
                path: path.clone(),
                size: bytes.len() as u64,
            })
            .collect(),
    }
}

/// A running program's output as a streamed answer's event; none for its start, which only
/// begins the answer.
pub fn exec_event(chunk: OutputChunk) -> Option<api::ExecEvent> {
    let event = match chunk {
        OutputChunk::Running => return None,
        OutputChunk::Text {
            stream: Stream::Stdout,
            text,
        } => api::ExecEvent::Stdout { text },
        OutputChunk::Text {
            stream: Stream::Stderr,
            text,
        } => api::ExecEvent::Stderr { text },
        OutputChunk::Display(Display { data, result }) => api::ExecEvent::Display { data, result },
        OutputChunk::Started(execution_id) => api::ExecEvent::Started { execution_id },
        OutputChunk::ToolCall(ToolCall {
            id,
            name,
            arguments,
        }) => api::ExecEvent::ToolCall {
            id,
            name,
            // Checked JSON when the call was made.
            arguments: serde_json::from_str(&arguments).unwrap_or_default(),
        },
    };
    Some(event)
}

/// A job's outcome as the response carries it, with how long it waited and ran.
pub fn response(executed: Executed) -> api::ExecResponse {
    let Executed {
        outcome,
        queued_ms,
        duration_ms,
    } = executed;
    api::ExecResponse {
        status: status(outcome.status),
        stdout: outcome.stdout,
        stderr: outcome.stderr,
        truncated: outcome.truncated,
        result: outcome.result,
        display: outcome.display.into_iter().map(display).collect(),
        error: outcome.error.map(error_body),
        duration_ms,
        queued_ms,
        session: outcome.session.map(exec_session),
        files: files(outcome.files),
    }
}

pub fn status(status: Status) -> api::ExecStatus {
    match status {
        Status::Ok => api::ExecStatus::Ok,
        Status::Error => api::ExecStatus::Error,
        Status::Timeout => api::ExecStatus::Timeout,
    }
}

pub fn error_body(failure: Failure) -> api::ErrorBody {
    api::ErrorBody {
        kind: error_kind(failure.kind),
        message: failure.message,
        violations: failure
            .violations
            .into_iter()
            .map(|v| api::Violation {
                line: v.line,
                rule: v.rule,
                name: v.name,
            })
            .collect(),
    }
}

pub fn error_kind(kind: FailureKind) -> api::ErrorKind {
    match kind {
        FailureKind::SyntaxError => api::ErrorKind::SyntaxError,
        FailureKind::Exception => api::ErrorKind::Exception,
        FailureKind::Timeout => api::ErrorKind::Timeout,
        FailureKind::ResultTooLarge => api::ErrorKind::ResultTooLarge,
        FailureKind::OutOfMemory => api::ErrorKind::OutOfMemory,
        FailureKind::SandboxFailure => api::ErrorKind::SandboxFailure,
        FailureKind::ResourceLimit => api::ErrorKind::ResourceLimit,
        FailureKind::PolicyViolation => api::ErrorKind::PolicyViolation,
        FailureKind::FileLimit => api::ErrorKind::FileLimit,
        FailureKind::WallClock => api::ErrorKind::WallClock,
        FailureKind::InstallFailed => api::ErrorKind::InstallFailed,
    }
}

fn exec_session(session: SessionRef) -> api::ExecSession {
    let (restored_from_checkpoint, lost_execs) = lost(session.lost);
    api::ExecSession {
        id: session.id,
        rolled_back: session.rolled_back,
        checkpoint: session.checkpoint,
        restored_from_checkpoint,
        lost_execs,
    }
}

/// A session's loss as the wire says it: the checkpoint it is back at, and how many execs.
fn lost(lost: Option<Loss>) -> (Option<u64>, u64) {
    match lost {
        Some(Loss {
            restored_from_checkpoint,
            lost_execs,
        }) => (Some(restored_from_checkpoint), lost_execs),
        None => (None, 0),
    }
}

/// A program's files for its response: text where the bytes are UTF-8, base64 otherwise.
pub fn files(files: Files) -> api::FileMap {
    files
        .into_iter()
        .map(|(path, bytes)| (path, api::FileData::from_bytes(bytes)))
        .collect()
}

pub fn session_info(info: SessionInfo) -> api::SessionInfo {
    let (restored_from_checkpoint, lost_execs) = lost(info.lost);
    api::SessionInfo {
        id: info.id,
        language: info.language,
        created_at: rfc3339(info.created_at),
        expires_at: rfc3339(info.expires_at),
        idle_timeout_s: info.idle_timeout.as_secs(),
        labels: info.labels.as_map().clone(),
        env: info.env.as_map().clone(),
        execs: info.execs,
        memory_bytes: info.memory_bytes,
        checkpoint: info.checkpoint,
        checkpoints: info.checkpoints,
        restored_from_checkpoint,
        lost_execs,
        durable: info.durable,
        parked: info.parked,
        lost: info.gone,
        packages: Vec::new(),
    }
}

pub fn checkpoint_info(info: CheckpointInfo) -> api::CheckpointInfo {
    api::CheckpointInfo {
        checkpoint: info.number,
        parent: info.parent,
        created_at: rfc3339(info.made_at),
        request_id: info.request_id,
        bytes: info.bytes,
        durable: info.durable,
    }
}

pub fn session_counts(
    counts: BTreeMap<Language, SessionCounts>,
) -> BTreeMap<Language, api::SessionCounts> {
    counts
        .into_iter()
        .map(|(language, c)| {
            let counts = api::SessionCounts {
                live: c.live,
                memory_bytes: c.memory_bytes,
                parked: c.parked,
            };
            (language, counts)
        })
        .collect()
}

pub fn sandbox_counts(
    counts: BTreeMap<Language, PoolCounts>,
) -> BTreeMap<Language, api::SandboxCounts> {
    counts
        .into_iter()
        .map(|(language, c)| {
            let counts = api::SandboxCounts {
                ready: c.ready,
                total: c.total,
                target: c.target,
            };
            (language, counts)
        })
        .collect()
}

/// The state directory's health on the wire.
pub fn durable_health(health: crate::job::DurableHealth) -> api::DurableHealth {
    let crate::job::DurableHealth { dir, writes } = health;
    api::DurableHealth {
        dir: dir.display().to_string(),
        writing: !writes.failing,
        failed_writes: writes.failed,
        last_error: writes.last_error,
    }
}

fn display(item: Display) -> api::DisplayData {
    let Display { data, result } = item;
    api::DisplayData { data, result }
}

/// Each language's runtime and version.
pub fn runtimes(runtimes: &BTreeMap<Language, Runtime>) -> BTreeMap<Language, api::Runtime> {
    runtimes
        .iter()
        .map(|(&language, runtime)| {
            let Runtime {
                name,
                version,
                packages: _,
            } = runtime;
            let runtime = api::Runtime {
                name: (*name).to_owned(),
                version: version.clone(),
            };
            (language, runtime)
        })
        .collect()
}

/// The packages of each language that has some.
pub fn packages(
    runtimes: &BTreeMap<Language, Runtime>,
) -> BTreeMap<Language, BTreeMap<String, String>> {
    runtimes
        .iter()
        .filter(|(_, runtime)| !runtime.packages.is_empty())
        .map(|(&language, runtime)| (language, runtime.packages.clone()))
        .collect()
}

pub fn session_limits(settings: &SessionSettings) -> api::SessionLimits {
    api::SessionLimits {
        max_sessions: settings.max_sessions,
        max_sessions_per_caller: settings.max_per_caller,
        default_idle_timeout_s: settings.default_idle.as_secs(),
        max_idle_timeout_s: settings.max_idle.as_secs(),
        max_lifetime_s: settings.max_lifetime.as_secs(),
        memory_budget_bytes: settings.memory_budget,
        max_checkpoints: settings.max_checkpoints,
        max_checkpoint_bytes: settings.max_checkpoint_bytes,
        park_after_s: settings.park_after.map(|after| after.as_secs()),
    }
}

/// `at` in RFC 3339, UTC, to the millisecond.
fn rfc3339(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at)
        .ok()
        .and_then(|t| t.round(jiff::Unit::Millisecond).ok())
        .map_or_else(|| "unknown".to_owned(), |t| t.to_string())
}

/// A tool as a request declares it.
pub fn declared(spec: api::ToolSpec) -> Declared {
    Declared {
        name: spec.name,
        description: spec.description,
        parameters: spec.parameters,
    }
}

/// A caller's answer to a tool call: the result as JSON text, or the tool's error. Exactly one
/// of the two.
pub fn tool_result(answer: &api::ToolResult) -> Result<ToolResult, String> {
    match (&answer.result, &answer.error) {
        (Some(result), None) => Ok(Ok(result.to_string())),
        (None, Some(error)) => Ok(Err(error.clone())),
        _ => Err("give exactly one of `result` and `error`".to_owned()),
    }
}

/// What an install did, as the API answers it.
pub fn installed(installed: super::Installed) -> api::InstallResponse {
    let plan = installed.plan;
    api::InstallResponse {
        installed: plan
            .install
            .into_iter()
            .map(|p| api::PackageInstalled {
                name: p.name.to_string(),
                version: p.version.to_string(),
                wheel: p.filename,
                sha256: p.sha256,
                cached: p.cached,
                needed_by: p.needed_by.map(|n| n.to_string()),
            })
            .collect(),
        present: plan
            .satisfied
            .into_iter()
            .map(|(name, version)| api::PackagePresent {
                name: name.to_string(),
                version: version.to_string(),
            })
            .collect(),
        checkpoint: installed.checkpoint,
    }
}

/// What a session installed, as the API lists it.
pub fn package_list(installed: Vec<crate::packages::InstalledPackage>) -> api::PackageList {
    api::PackageList {
        packages: session_packages(installed),
    }
}

/// A session, with what it installed.
pub fn session_detail(
    info: SessionInfo,
    installed: Vec<crate::packages::InstalledPackage>,
) -> api::SessionInfo {
    api::SessionInfo {
        packages: session_packages(installed),
        ..session_info(info)
    }
}

fn session_packages(installed: Vec<crate::packages::InstalledPackage>) -> Vec<api::SessionPackage> {
    installed
        .into_iter()
        .map(|p| api::SessionPackage {
            name: p.name,
            version: p.version,
            sha256: p.sha256,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_named_in_spans_as_on_the_wire() {
        for kind in [
            FailureKind::SyntaxError,
            FailureKind::Exception,
            FailureKind::Timeout,
            FailureKind::ResultTooLarge,
            FailureKind::OutOfMemory,
            FailureKind::SandboxFailure,
            FailureKind::ResourceLimit,
            FailureKind::PolicyViolation,
            FailureKind::FileLimit,
            FailureKind::WallClock,
            FailureKind::InstallFailed,
        ] {
            assert_eq!(kind.as_str(), error_kind(kind).as_str(), "{kind:?}");
        }
    }
}
