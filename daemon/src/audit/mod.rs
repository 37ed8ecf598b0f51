//! The audit log: one JSON line per execution, per session event and per refused caller, so that
//! an operator can answer "who ran what, when, with what outcome".
//!
//! A line is written whole, with one `write` to a file opened for appending (or to standard
//! error, which systemd sends to the journal), before the request is answered: a crash loses at
//! most the line in flight, and log rotation by copy-and-truncate is safe. The code itself is
//! not logged, only its SHA-256 and size, unless `--audit-code` says so. A line that cannot be
//! written (a full disk, a file made unwritable) is counted and reported in `/v1/health` and
//! the metrics; the daemon goes on serving.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use clap::Args;
use hyperlightd_api::{AuditHealth, ErrorKind, Language};
use prometheus::IntCounterVec;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::job::{Caller, Principal};

/// Mode of an audit log file the daemon creates: its owner writes, its group reads.
const FILE_MODE: u32 = 0o640;

/// The audit log's options.
#[derive(Debug, Clone, Args)]
pub struct AuditOptions {
    /// Where to write the audit log, one JSON line per execution and session event: a file
    /// (appended to, created with mode 0640), or `-` for standard error (under systemd, the
    /// journal).
    ///
    /// None by default.
    #[arg(long, value_name = "PATH")]
    pub audit_log: Option<PathBuf>,

    /// Write each execution's code into the audit log, not only its SHA-256 and size.
    #[arg(long)]
    pub audit_code: bool,
}

/// The audit log file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the audit log {path:?} (--audit-log): {source}")]
pub struct AuditOpenError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

#[derive(Debug)]
enum Sink {
    Off,
    Stderr,
    File { path: PathBuf, file: Mutex<File> },
}

/// The audit log.
#[derive(Debug)]
pub struct AuditLog {
    sink: Sink,
    with_code: bool,
    written: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Lines by `outcome` (written, failed), when the daemon's metrics are attached.
    metrics: Option<IntCounterVec>,
}

/// An execution, as its audit line tells it.
#[derive(Debug, Serialize)]
pub struct ExecRecord<'a> {
    /// The request's id (its `x-request-id`).
    pub request_id: u64,
    /// Who asked.
    pub caller: Caller,
    /// The language.
    pub language: Language,
    /// The session it ran in, if any.
    pub session: Option<&'a str>,
    /// In a session, the checkpoint the exec left it at (the one it made, or the one it is
    /// back at); absent outside a session and when nothing ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    /// The code's SHA-256, its size, and the code itself with `--audit-code`.
    #[serde(flatten)]
    pub code: &'a Code,
    /// `ok`, `error` or `timeout` for a program that ran; `rejected` when nothing ran.
    pub status: &'a str,
    /// Why it failed or was rejected.
    pub error_kind: Option<ErrorKind>,
    /// How long the program ran in its sandbox (0 when nothing ran).
    pub duration_ms: f64,
    /// From the request's arrival to its program's start (or to its refusal).
    pub queued_ms: f64,
    /// Bytes of stdout and stderr returned.
    pub output_bytes: usize,
    /// Whether the output was cut at its cap.
    pub truncated: bool,
    /// The tools it called, by name, and how many times (never their arguments or results);
    /// absent when it declared none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<&'a BTreeMap<String, u32>>,
    /// The trace the request is in (the caller's `traceparent`'s, or the daemon's own with
    /// tracing on), to find its spans; absent when it is in none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// What the audit log says of a program's code.
#[derive(Debug, Clone, Serialize)]
pub struct Code {
    /// SHA-256 of the code's UTF-8 bytes, in hex.
    pub code_sha256: String,
    /// The code's size in bytes.
    pub code_bytes: usize,
    /// The code, with `--audit-code`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// A session's owner in its audit lines: `"owner_uid": 1000`, `"owner_pod": "…"`, or for a
/// caller a delegate acts for `"owner_uid"` the delegate's and `"owner_for"` the name.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a>(pub &'a Principal);

impl serde::Serialize for Owner<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        match self.0 {
            Principal::Uid(uid) => map.serialize_entry("owner_uid", uid)?,
            Principal::Pod(pod) => map.serialize_entry("owner_pod", pod.as_ref())?,
            Principal::Delegated { delegate, name } => {
                map.serialize_entry("owner_uid", delegate)?;
                map.serialize_entry("owner_for", name.as_ref())?;
            }
        }
        map.end()
    }
}

/// A session created, forked, rolled back, deleted or expired.
#[derive(Debug, Serialize)]
pub struct SessionRecord<'a> {
    /// The request's id; absent for an expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<u64>,
    /// Who asked; absent for an expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<Caller>,
    /// Who the session belongs to: `"owner_uid"` (a number), or with `--pod-identity`
    /// `"owner_pod"` (a pod).
    #[serde(flatten)]
    pub owner: Owner<'a>,
    /// The session.
    pub session: &'a str,
    /// Its language.
    pub language: Language,
    /// For a fork, the session it copies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<&'a str>,
    /// For an expiry: `idle` or `lifetime`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// For a fork, the checkpoint of `from` it starts from; for a rollback, the checkpoint
    /// the session is back at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
}

/// An outbound HTTP request a program made (each redirect followed is one), allowed or not.
/// Never a header, a body, or the query of its URL.
#[derive(Debug, Serialize)]
pub struct EgressRecord<'a> {
    /// The request id of the execution that made it.
    pub request_id: u64,
    /// Who asked for that execution.
    pub caller: Caller,
    pub method: &'a str,
    /// `http` or `https`; absent when the URL could not be read.
    pub scheme: Option<&'a str>,
    pub host: Option<&'a str>,
    pub port: Option<u16>,
    /// The URL's path, without its query.
    pub path: Option<&'a str>,
    /// Which hop of a chain of redirects it was (0: the program's own request).
    pub redirect: u32,
    /// The response's status, when one came.
    pub status: Option<u16>,
    /// Body bytes sent and received.
    pub bytes_sent: usize,
    pub bytes_received: usize,
    pub duration_ms: f64,
    /// Why it brought no response: `refused`, `invalid`, `limit`, `timeout` or `failed`.
    pub error_kind: Option<&'a str>,
    /// What the program was told.
    pub error: Option<&'a str>,
}

/// An install of packages: what was asked, what was installed (or found there), and how it
/// ended.
#[derive(Debug, Serialize)]
pub struct InstallRecord<'a> {
    /// The request's id.
    pub request_id: u64,
    /// Who asked.
    pub caller: Caller,
    /// The session it installed in; absent for a plain exec's.
    pub session: Option<&'a str>,
    /// The requirements asked for.
    pub requirements: &'a [String],
    /// The wheels installed (or that would have been, for one that failed in the sandbox).
    pub packages: Vec<PackageLine>,
    /// `installed`, `present` (all there already), `install_failed`, `not_kept` (the exec's
    /// effects were dropped), or why it was refused (the exec's own refusal included).
    pub outcome: &'a str,
    /// What the caller was told, for one that did not install.
    pub error: Option<String>,
}

/// One wheel of an install's audit line.
#[derive(Debug, Serialize)]
pub struct PackageLine {
    pub name: String,
    pub version: String,
    pub sha256: String,
    /// `cache`, or the index's URL of the wheel.
    pub source: String,
}

/// A caller refused by the allow lists.
#[derive(Debug, Serialize)]
pub struct DeniedRecord<'a> {
    /// The request's id.
    pub request_id: u64,
    /// Who asked.
    pub caller: Caller,
    /// The request's method and path.
    pub method: &'a str,
    /// The path.
    pub path: &'a str,
    /// Whence it came, for a request that had no caller to name (E2B's listener: no key it
    /// knows, `caller` then being the listener's own uid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

/// One line: when, what, and the event's own fields.
#[derive(Serialize)]
struct Line<'a, T> {
    time: String,
    audit: &'a str,
    #[serde(flatten)]
    fields: &'a T,
}

impl AuditLog {
    /// No audit log.
    pub fn off() -> Self {
        Self::with_sink(Sink::Off, false)
    }

    /// The audit log `options` ask for: the file is opened (and created) now.
    pub fn open(options: &AuditOptions) -> Result<Self, AuditOpenError> {
        let sink = match &options.audit_log {
            None => Sink::Off,
            Some(path) if path.as_os_str() == "-" => Sink::Stderr,
            Some(path) => {
                let file = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(FILE_MODE)
                    .open(path)
                    .map_err(|source| AuditOpenError {
                        path: path.clone(),
                        source,
                    })?;
                Sink::File {
                    path: path.clone(),
                    file: Mutex::new(file),
                }
            }
        };
        Ok(Self::with_sink(sink, options.audit_code))
    }

    fn with_sink(sink: Sink, with_code: bool) -> Self {
        AuditLog {
            sink,
            with_code,
            written: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
            metrics: None,
        }
    }

    /// Counts lines in `metrics` (by `outcome`: written, failed) as well.
    pub fn with_metrics(mut self, metrics: IntCounterVec) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// What the log says of `code`.
    pub fn code(&self, code: &str) -> Code {
        let digest = Sha256::digest(code.as_bytes());
        Code {
            code_sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
            code_bytes: code.len(),
            code: self.with_code.then(|| code.to_owned()),
        }
    }

    /// Whether lines are written anywhere.
    pub fn is_on(&self) -> bool {
        !matches!(self.sink, Sink::Off)
    }

    /// Writes an execution's line.
    pub fn exec(&self, record: &ExecRecord<'_>) {
        self.write("exec", record);
    }

    /// Writes a session event's line: `event` is `session_created`, `session_forked`,
    /// `session_rolled_back`, `session_parked`, `session_restarted`, `session_files_changed`, `session_deleted` or `session_expired`.
    pub fn session(&self, event: &str, record: &SessionRecord<'_>) {
        self.write(event, record);
    }

    /// Writes an outbound request's line.
    pub fn egress(&self, record: &EgressRecord<'_>) {
        self.write("egress", record);
    }

    /// Writes an install's line.
    pub fn install(&self, record: &InstallRecord<'_>) {
        self.write("install", record);
    }

    /// Writes a refused caller's line.
    pub fn denied(&self, record: &DeniedRecord<'_>) {
        self.write("denied", record);
    }

    fn write<T: Serialize>(&self, event: &str, fields: &T) {
        if !self.is_on() {
            return;
        }
        let line = Line {
            time: now(),
            audit: event,
            fields,
        };
        let written = serde_json::to_vec(&line)
            .map_err(std::io::Error::other)
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                self.put(&bytes)
            });
        match written {
            Ok(()) => self.count("written", &self.written),
            Err(e) => {
                self.count("failed", &self.failed);
                let message = e.to_string();
                let mut last = self
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if last.as_deref() != Some(&message) {
                    warn!(
                        "writing the audit log failed: {message}; its lines are lost until it works again"
                    );
                }
                *last = Some(message);
            }
        }
    }

    fn put(&self, bytes: &[u8]) -> std::io::Result<()> {
        match &self.sink {
            Sink::Off => Ok(()),
            Sink::Stderr => std::io::stderr().lock().write_all(bytes),
            Sink::File { file, .. } => file
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .write_all(bytes),
        }
    }

    fn count(&self, outcome: &str, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            metrics.with_label_values(&[outcome]).inc();
        }
    }

    /// What `/v1/health` reports; None without an audit log.
    pub fn health(&self) -> Option<AuditHealth> {
        let destination = match &self.sink {
            Sink::Off => return None,
            Sink::Stderr => "stderr".to_owned(),
            Sink::File { path, .. } => path.display().to_string(),
        };
        Some(AuditHealth {
            destination,
            lines: self.written.load(Ordering::Relaxed),
            failed_lines: self.failed.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        })
    }
}

/// Now, in RFC 3339 (UTC, milliseconds).
fn now() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Millisecond)
        .unwrap_or(now)
        .to_string()
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
