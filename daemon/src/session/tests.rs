//! The session table's rules, and a session's exec through its whole lifecycle
//! ([`Sessions::exec`]) with a fake worker: no KVM. On tokio's paused clock (but the durable
//! tests, whose writer is a thread of its own): waiting, saving and expiry take no real time.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::oneshot;

use super::*;
use crate::job::files::{FileChange, FileError};
use crate::job::{
    After, Caller, Env, FileLimits, Files, Job, Outcome, PodOf, Principal, Ran, Saved, SavedState,
    Status,
};
use crate::metrics::Metrics;

mod checkpoints;
mod durable;
mod lifecycle;
mod limits;

/// The uid the tests' sessions belong to.
const OWNER: &Principal = &Principal::Uid(1000);

fn audit_off() -> Arc<AuditLog> {
    Arc::new(AuditLog::off())
}

fn settings() -> SessionSettings {
    SessionSettings {
        max_sessions: 4,
        max_per_caller: 4,
        exempt_uid: None,
        default_idle: Duration::from_secs(60),
        max_idle: Duration::from_secs(120),
        max_lifetime: Duration::from_secs(3600),
        memory_budget: 1000,
        max_checkpoints: 1,
        max_checkpoint_bytes: u64::MAX,
        park_after: None,
    }
}

fn sessions(settings: SessionSettings) -> Arc<Sessions> {
    let metrics = Metrics::new().unwrap().sessions();
    Arc::new(Sessions::new(
        settings,
        &[Language::Javascript, Language::Python],
        metrics,
        audit_off(),
    ))
}

fn outcome() -> Outcome {
    Outcome {
        status: Status::Ok,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        result: serde_json::Value::Null,
        display: Vec::new(),
        error: None,
        session: None,
        files: Files::new(),
        started: clock::now(),
        ran: Duration::ZERO,
    }
}

/// `OWNER`'s new session of `language`: the default idle timeout, no labels, no variables.
fn create(sessions: &Sessions, language: Language) -> Result<SessionInfo, ExecError> {
    sessions.create(OWNER, language, None, Labels::default(), Default::default())
}

/// A fake worker: runs one job with `run`, handed the state it starts from and the job (its
/// files laid over the session's, its deadline moved on by the saving it waited for).
struct Fake<F>(Mutex<Option<F>>);

impl<F, Fut> Runner for Fake<F>
where
    F: FnOnce(Option<SavedState>, Job) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Ran, ExecError>> + Send + 'static,
{
    fn run(
        &self,
        job: Job,
        state: Option<SavedState>,
    ) -> impl Future<Output = Result<Ran, ExecError>> + Send {
        let run = self.0.lock().unwrap().take();
        async move {
            match run {
                Some(run) => run(state, job).await,
                None => Err(ExecError::Internal("the fake ran twice".to_owned())),
            }
        }
    }
}

/// A job of `id`, with `files` for its working directory.
fn job(request_id: u64, deadline: Instant, timeout: Duration, files: Files) -> Job {
    Job {
        request_id,
        language: Language::Python,
        code: String::new(),
        timeout,
        deadline,
        max_output_bytes: 1000,
        policy: None,
        output: None,
        files,
        file_changes: Vec::new(),
        fresh_interpreter: false,
        packages: Vec::new(),
        env: Default::default(),
        file_limits: FileLimits {
            max_entries: 10,
            max_bytes: 1000,
        },
        span: tracing::Span::none(),
        trace: crate::telemetry::Trace::off(),
        tools: None,
        egress: None,
        caller: Caller {
            uid: 1000,
            gid: 1000,
            pid: None,
            pod: PodOf::Unread,
            on_behalf_of: None,
        },
    }
}

/// Runs an exec in `owner`'s session `id` through the session's own lifecycle
/// ([`Sessions::exec`]), whose worker is `run`.
async fn exec_with<F, Fut>(
    sessions: &Arc<Sessions>,
    owner: &Principal,
    id: &str,
    deadline: Instant,
    timeout: Duration,
    run: F,
) -> Result<Outcome, ExecError>
where
    F: FnOnce(Option<SavedState>, Job) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Ran, ExecError>> + Send + 'static,
{
    exec_job(
        sessions,
        owner,
        id,
        job(1, deadline, timeout, Files::new()),
        run,
    )
    .await
}

/// [`exec_with`], of `job`.
async fn exec_job<F, Fut>(
    sessions: &Arc<Sessions>,
    owner: &Principal,
    id: &str,
    job: Job,
    run: F,
) -> Result<Outcome, ExecError>
where
    F: FnOnce(Option<SavedState>, Job) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Ran, ExecError>> + Send + 'static,
{
    let session = sessions.find(owner, id)?;
    let runner = Arc::new(Fake(Mutex::new(Some(run))));
    sessions.exec(session, job, runner).await
}

/// What the fake worker saw: the state it started from (a number, or None for warm).
fn seen(state: &Option<SavedState>) -> Option<u32> {
    state.as_ref().map(|s| *s.get::<u32>().unwrap())
}

/// The working directory an exec saving `value` leaves: one file holding it.
fn files_of(value: u32) -> Arc<Files> {
    Arc::new([("state.txt".to_owned(), value.to_string().into_bytes())].into())
}

/// A worker's answer whose saving gives `value` as the new state, `bytes` big (None: the save
/// failed).
fn saving(value: Option<u32>, bytes: u64) -> Ran {
    let (saved, saving) = oneshot::channel();
    saved
        .send(value.map(|value| Saved {
            state: SavedState::new(value),
            bytes,
            memory: Vec::new(),
            files: files_of(value),
        }))
        .unwrap();
    Ran {
        outcome: outcome(),
        after: After::Saving(saving),
    }
}

/// Runs an exec whose worker saves `value` as the new state, `bytes` big; returns the state
/// the exec started from.
async fn exec_saving(sessions: &Arc<Sessions>, id: &str, value: u32, bytes: u64) -> Option<u32> {
    let (tx, rx) = oneshot::channel();
    let run = move |state: Option<SavedState>, _job| async move {
        tx.send(seen(&state)).unwrap();
        Ok(saving(Some(value), bytes))
    };
    let deadline = clock::now() + Duration::from_secs(5);
    let outcome = exec_with(sessions, OWNER, id, deadline, Duration::from_secs(5), run)
        .await
        .unwrap();
    assert!(!outcome.session.unwrap().rolled_back);
    rx.await.unwrap()
}

async fn exec_rolling_back(sessions: &Arc<Sessions>, id: &str) -> Outcome {
    let run = |_state, _job| async {
        Ok(Ran {
            outcome: outcome(),
            after: After::RolledBack("timeout"),
        })
    };
    let deadline = clock::now() + Duration::from_secs(5);
    exec_with(sessions, OWNER, id, deadline, Duration::from_secs(5), run)
        .await
        .unwrap()
}

/// Waits until the session's saved state is in (saving happens after the answer).
async fn settled(sessions: &Arc<Sessions>, id: &str) {
    let session = sessions.find(OWNER, id).unwrap();
    drop(session.history.lock().await);
}

#[tokio::test(start_paused = true)]
async fn state_carries_from_one_exec_to_the_next_and_memory_is_counted() {
    let sessions = sessions(settings());
    let info = create(&sessions, Language::Python).unwrap();
    assert_eq!(info.id.len(), 32);
    assert!(info.id.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(exec_saving(&sessions, &info.id, 1, 100).await, None);
    settled(&sessions, &info.id).await;
    assert_eq!(exec_saving(&sessions, &info.id, 2, 300).await, Some(1));
    settled(&sessions, &info.id).await;
    assert_eq!(exec_saving(&sessions, &info.id, 3, 200).await, Some(2));
    settled(&sessions, &info.id).await;
    let info = sessions.get(OWNER, &info.id).unwrap();
    assert_eq!((info.execs, info.memory_bytes), (3, 200));
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 200);
    assert_eq!(sessions.counts()[&Language::Javascript].live, 0);
    sessions.delete(OWNER, &info.id).unwrap();
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 0);
    assert!(matches!(
        sessions.get(OWNER, &info.id),
        Err(ExecError::SessionNotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_rolled_back_exec_leaves_the_state_from_before_it() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Javascript).unwrap().id;
    exec_saving(&sessions, &id, 7, 10).await;
    settled(&sessions, &id).await;
    let outcome = exec_rolling_back(&sessions, &id).await;
    assert!(outcome.session.unwrap().rolled_back);
    assert_eq!(exec_saving(&sessions, &id, 8, 10).await, Some(7));
}

#[tokio::test(start_paused = true)]
async fn a_fork_shares_the_state_until_either_changes_and_memory_is_counted_once() {
    let sessions = sessions(settings());
    let origin = create(&sessions, Language::Python).unwrap().id;
    exec_saving(&sessions, &origin, 5, 400).await;
    let fork = sessions
        .fork(OWNER, &origin, None, Duration::from_secs(5))
        .await
        .unwrap();
    assert_ne!(fork.id, origin);
    assert_eq!(fork.memory_bytes, 400);
    assert_eq!(fork.execs, 0);
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 400);
    assert_eq!(exec_saving(&sessions, &fork.id, 6, 100).await, Some(5));
    settled(&sessions, &fork.id).await;
    assert_eq!(exec_saving(&sessions, &origin, 9, 100).await, Some(5));
    settled(&sessions, &origin).await;
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 200);
    assert_eq!(sessions.counts()[&Language::Python].live, 2);
}

#[tokio::test(start_paused = true)]
async fn execs_of_one_session_run_one_at_a_time_in_arrival_order() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    let running = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut execs = Vec::new();
    for n in 0..5u32 {
        let (sessions, id) = (sessions.clone(), id.clone());
        let (running, order) = (running.clone(), order.clone());
        execs.push(tokio::spawn(async move {
            let run = move |state: Option<SavedState>, _job| async move {
                assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0, "two at once");
                order.lock().unwrap().push((n, seen(&state)));
                tokio::time::sleep(Duration::from_millis(20)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                let (saved, saving) = oneshot::channel();
                saved
                    .send(Some(Saved {
                        state: SavedState::new(n),
                        bytes: 1,
                        memory: Vec::new(),
                        files: files_of(n),
                    }))
                    .unwrap();
                Ok(Ran {
                    outcome: outcome(),
                    after: After::Saving(saving),
                })
            };
            let deadline = clock::now() + Duration::from_secs(10);
            exec_with(
                &sessions,
                OWNER,
                &id,
                deadline,
                Duration::from_secs(10),
                run,
            )
            .await
            .unwrap();
        }));
        // Arrival order: each exec is waiting for its turn before the next one arrives.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for exec in execs {
        exec.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        vec![
            (0, None),
            (1, Some(0)),
            (2, Some(1)),
            (3, Some(2)),
            (4, Some(3))
        ]
    );
}

/// An exec whose worker answers at once and takes `save` to save `value`; its time limit is
/// `limit`. Returns the deadline its worker was handed, and when its answer came.
async fn exec_with_slow_save(
    sessions: &Arc<Sessions>,
    id: &str,
    value: u32,
    limit: Duration,
    save: Duration,
) -> Result<(Instant, Instant), ExecError> {
    let (handed, deadline_seen) = oneshot::channel();
    let run = move |_state, job: Job| async move {
        handed.send(job.deadline).unwrap();
        let (saved, saving) = oneshot::channel();
        tokio::spawn(async move {
            tokio::time::sleep(save).await;
            let _ = saved.send(Some(Saved {
                state: SavedState::new(value),
                bytes: 1,
                memory: Vec::new(),
                files: files_of(value),
            }));
        });
        Ok(Ran {
            outcome: outcome(),
            after: After::Saving(saving),
        })
    };
    let deadline = clock::now() + limit;
    exec_with(sessions, OWNER, id, deadline, limit, run).await?;
    Ok((deadline_seen.await.unwrap(), clock::now()))
}

#[tokio::test(start_paused = true)]
async fn an_exec_sent_after_the_last_answer_waits_for_the_save_outside_its_time_limit() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    let save = Duration::from_millis(600);
    let limit = Duration::from_millis(200);
    // Three execs back to back, each sent the moment the last one's answer came, each with a
    // time limit shorter than the save it waits for: none is refused, and each worker is
    // handed a deadline moved on by the save.
    exec_with_slow_save(&sessions, &id, 1, limit, save)
        .await
        .unwrap();
    for value in [2, 3] {
        let sent = clock::now();
        let (deadline, _) = exec_with_slow_save(&sessions, &id, value, limit, save)
            .await
            .unwrap();
        let moved = deadline.saturating_duration_since(sent + limit);
        assert!(moved >= save - Duration::from_millis(100), "{moved:?}");
    }
    settled(&sessions, &id).await;
    let session = sessions.find(OWNER, &id).unwrap();
    let history = session.history.lock().await;
    let image = history.head().image().unwrap();
    assert_eq!(*image.state().get::<u32>().unwrap(), 3);
}

#[tokio::test(start_paused = true)]
async fn waiting_for_a_turn_past_the_deadline_is_session_busy_and_nothing_runs() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    let session = sessions.find(OWNER, &id).unwrap();
    let held = session.history.clone().lock_owned().await;
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let run = move |_state, _job| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    let deadline = clock::now() + Duration::from_millis(50);
    let result = exec_with(
        &sessions,
        OWNER,
        &id,
        deadline,
        Duration::from_millis(50),
        run,
    )
    .await;
    assert!(
        matches!(result, Err(ExecError::SessionBusy { .. })),
        "{result:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn files_follow_the_state_through_rollback_and_fork() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    let wait = Duration::from_secs(1);
    assert!(sessions.files(OWNER, &id, wait).await.unwrap().is_empty());
    // A new session's files (none) are read at once while its first exec runs.
    let session = sessions.find(OWNER, &id).unwrap();
    let held = session.history.lock().await;
    assert!(
        sessions
            .head_files(OWNER, &id, wait)
            .await
            .unwrap()
            .is_empty()
    );
    drop(held);
    exec_saving(&sessions, &id, 7, 10).await;
    exec_rolling_back(&sessions, &id).await;
    assert_eq!(sessions.files(OWNER, &id, wait).await.unwrap(), files_of(7));
    let fork = sessions.fork(OWNER, &id, None, wait).await.unwrap();
    exec_saving(&sessions, &id, 8, 10).await;
    assert_eq!(
        sessions.files(OWNER, &fork.id, wait).await.unwrap(),
        files_of(7)
    );
    assert_eq!(sessions.files(OWNER, &id, wait).await.unwrap(), files_of(8));
    // While an exec holds the history, the newest checkpoint's files are read at once.
    let session = sessions.find(OWNER, &id).unwrap();
    let held = session.history.lock().await;
    let head = sessions.head_files(OWNER, &id, wait).await;
    assert_eq!(head.unwrap(), files_of(8));
    drop(held);
    exec_rolling_back(&sessions, &id).await;
    let head = sessions.head_files(OWNER, &fork.id, wait).await;
    assert_eq!(head.unwrap(), files_of(7));
    assert!(matches!(
        sessions.files(&Principal::Uid(1001), &id, wait).await,
        Err(ExecError::SessionNotFound(_))
    ));
}

#[tokio::test]
async fn a_daemon_without_a_state_directory_parks_nothing_and_says_why() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    let refused = sessions.park_now(OWNER, &id, Duration::from_secs(1)).await;
    assert!(
        matches!(refused, Err(ExecError::NotParkable(ref why)) if why.contains("--state-dir")),
        "{refused:?}"
    );
}
