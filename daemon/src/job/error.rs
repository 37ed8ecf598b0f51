//! Why the executor did not run a job.

use std::time::Duration;

use super::Language;

/// Why the executor did not run a job. Nothing ran; the caller may retry where it says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// Every sandbox of the language is busy and its queue is full.
    #[error("all {language} sandboxes are busy and {queued} requests are already waiting")]
    Overloaded {
        /// The language.
        language: Language,
        /// The queue's depth.
        queued: usize,
    },
    /// The job waited for a sandbox for its whole time limit and never got one: every sandbox
    /// was busy (or being replaced) until its deadline. Nothing ran.
    #[error(
        "no {language} sandbox became free within the request's time limit of {} ms (all were \
         busy or being replaced); nothing ran. Retry, or allow more time with timeout_ms",
        .timeout.as_millis()
    )]
    NoSandboxAvailable {
        /// The language.
        language: Language,
        /// The request's time limit, all of it spent waiting.
        timeout: Duration,
    },
    /// The daemon runs no pool for the language.
    #[error("this daemon runs no {0} sandboxes (see its --pool option)")]
    LanguageNotServed(Language),
    /// No session has this id (never did, deleted, or expired).
    #[error(
        "no session {0}: it never existed, was deleted, or expired after its idle timeout or \
         lifetime. Create a new one with POST /v1/sessions"
    )]
    SessionNotFound(String),
    /// The session's state is gone: a restarted daemon could bring back none of its
    /// checkpoints from disk. Nothing ran.
    #[error(
        "session {id} lost its state: no checkpoint of it could be brought back from disk \
         ({why}). Delete it and create a new one with POST /v1/sessions"
    )]
    SessionLost {
        /// The session.
        id: String,
        /// Why each checkpoint was refused.
        why: String,
    },
    /// The session keeps no checkpoint of this number (never made, rolled back past, or
    /// dropped as the oldest beyond its retention).
    #[error(
        "the session keeps no checkpoint {checkpoint}; it keeps {}. List them with GET \
         /v1/sessions/{{id}}/checkpoints",
        numbers(.kept)
    )]
    CheckpointNotFound {
        /// The number asked for.
        checkpoint: u64,
        /// The numbers it keeps, oldest first.
        kept: Vec<u64>,
    },
    /// The daemon holds as many sessions as it may.
    #[error(
        "the daemon holds {limit} sessions, its limit (--max-sessions); delete sessions no \
         longer needed, or wait for idle ones to expire"
    )]
    TooManySessions {
        /// The limit.
        limit: usize,
    },
    /// The caller holds as many sessions as one caller may.
    #[error(
        "this caller ({caller}) holds {limit} sessions, as many as one caller may \
         (--max-sessions-per-caller); delete sessions it no longer needs, or wait for idle ones \
         to expire"
    )]
    SessionQuota {
        /// Whom the quota counts: the caller's uid, or its pod.
        caller: crate::job::Principal,
        /// The quota.
        limit: usize,
        /// When the caller's first session expires unless used.
        retry_after: Duration,
    },
    /// Session state holds the daemon's whole memory budget for it.
    #[error(
        "session state holds {} MiB, the daemon's budget of {} MiB (--session-memory-mib); \
         delete sessions no longer needed, or wait for idle ones to expire",
        .held >> 20, .budget >> 20
    )]
    SessionMemoryFull {
        /// Bytes held.
        held: u64,
        /// The budget.
        budget: u64,
    },
    /// The session's earlier execs (or forks) kept it busy for the request's whole time limit.
    #[error(
        "the session was busy with earlier execs for the request's whole time limit of {} ms; \
         nothing ran. Retry, or allow more time with timeout_ms",
        .timeout.as_millis()
    )]
    SessionBusy {
        /// The time limit, all of it spent waiting.
        timeout: Duration,
    },
    /// The state an earlier exec of the session left was still being saved when the job had
    /// waited for the saving as long as the daemon lets it (a save that long is a fault).
    #[error(
        "the session's state from its earlier exec was still being saved after {} s, longer \
         than an exec waits for it; nothing ran. Retry shortly",
        .waited.as_secs()
    )]
    SessionSaving {
        /// How long the job waited for the saving.
        waited: Duration,
    },
    /// The session's files and the request's together are more than a working directory may
    /// hold. Nothing ran.
    #[error(
        "the session's files and the request's together are more than a working directory may \
         hold ({0}); nothing ran. Send fewer or smaller files, or remove some in the session"
    )]
    FilesOverCap(String),
    /// A change to a session's files was refused (no such file, a file where a directory is
    /// needed, past a cap, ...). Nothing changed.
    #[error("the session's files were not changed: {0}")]
    FileRefused(crate::job::files::FileRefused),
    /// The session's environment and the request's together break the rules of an
    /// environment (see [`crate::job::env`]). Nothing ran.
    #[error("{0}; nothing ran")]
    EnvRefused(String),
    /// The session cannot be parked: the daemon keeps no sessions on disk, or not this one.
    #[error("{0}")]
    NotParkable(String),
    /// The session's newest checkpoint did not reach the disk, so it was not parked (it stays
    /// in memory, as it was).
    #[error("{0}")]
    ParkFailed(String),
    /// The language's pool has no worker left to take jobs. A bug, reported as a 500.
    #[error("the {0} pool has no workers left (a fault in the daemon; see its log)")]
    PoolGone(Language),
    /// The executor lost the job (a worker thread died). A bug, reported as a 500.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The message of a caught panic.
pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// `numbers` in words: "0, 3 and 4".
fn numbers(numbers: &[u64]) -> String {
    let words: Vec<String> = numbers.iter().map(u64::to_string).collect();
    match words.split_last() {
        None => "none".to_owned(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}
