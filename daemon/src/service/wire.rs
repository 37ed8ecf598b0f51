//! The one place where the core's types become the API's wire types, and the other way: each
//! mapping an exhaustive `match` or a whole struct, so that a new variant or field must be
//! decided here.

use super::tools::Declared;
use crate::job::tools::ToolResult;
use std::collections::BTreeMap;
use std::time::SystemTime;

use hyperlightd_api as api;

use crate::job::{
    CheckpointInfo, Display, Failure, FailureKind, Files, Language, Loss, Outcome, PoolCounts,
    Runtime, SessionCounts, SessionInfo, SessionRef, SessionSettings, Status,
};

/// A program's outcome as the response carries it, with how long it waited and ran.
pub fn response(outcome: Outcome, queued_ms: f64, duration_ms: f64) -> api::ExecResponse {
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
