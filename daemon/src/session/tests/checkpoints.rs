//! Checkpoints: numbered, listed, rolled back to, forked from, kept within the retention, and a
//! lost save said so.

use super::*;
use crate::job::{Loss, SessionRef};

/// The settings of the tests, keeping `count` checkpoints and `bytes`.
fn keeping(count: usize, bytes: u64) -> Arc<Sessions> {
    sessions(SessionSettings {
        max_checkpoints: count,
        max_checkpoint_bytes: bytes,
        memory_budget: u64::MAX,
        ..settings()
    })
}

const WAIT: Duration = Duration::from_secs(5);

/// Runs exec `request_id` in session `id`, whose worker saves `value` (`bytes` big), or fails
/// to save when `value` is None; returns the outcome's session part, once the state is saved,
/// and the state the exec started from.
async fn exec(
    sessions: &Arc<Sessions>,
    id: &str,
    request_id: u64,
    value: Option<u32>,
    bytes: u64,
) -> (SessionRef, Option<u32>) {
    let (started, saw) = oneshot::channel();
    let run = move |state: Option<SavedState>, _job| async move {
        started.send(seen(&state)).unwrap();
        Ok(saving(value, bytes))
    };
    let job = job(request_id, clock::now() + WAIT, WAIT, Files::new());
    let outcome = exec_job(sessions, OWNER, id, job, run).await.unwrap();
    settled(sessions, id).await;
    (outcome.session.unwrap(), saw.await.unwrap())
}

/// The numbers of the checkpoints session `id` keeps.
async fn numbers(sessions: &Arc<Sessions>, id: &str) -> Vec<u64> {
    let list = sessions.checkpoints(OWNER, id, WAIT).await.unwrap();
    list.iter().map(|c| c.number).collect()
}

#[tokio::test(start_paused = true)]
async fn each_exec_whose_state_is_kept_makes_the_next_checkpoint_and_names_it() {
    let sessions = keeping(8, u64::MAX);
    let id = create(&sessions, Language::Python).unwrap().id;
    assert_eq!(numbers(&sessions, &id).await, [0]);
    for (n, value) in [(1, 10), (2, 20), (3, 30)] {
        let (session, _) = exec(&sessions, &id, 100 + n, Some(value), n * 10).await;
        assert_eq!((session.checkpoint, session.rolled_back), (n, false));
    }
    // A rolled-back exec makes none: it names the one it started from.
    let rolled_back = exec_rolling_back(&sessions, &id).await.session.unwrap();
    assert_eq!((rolled_back.checkpoint, rolled_back.rolled_back), (3, true));

    let list = sessions.checkpoints(OWNER, &id, WAIT).await.unwrap();
    let described: Vec<_> = list
        .iter()
        .map(|c| (c.number, c.parent, c.request_id, c.bytes))
        .collect();
    assert_eq!(
        described,
        [
            (0, None, None, 0),
            (1, Some(0), Some(101), 10),
            (2, Some(1), Some(102), 20),
            (3, Some(2), Some(103), 30),
        ]
    );
    let info = sessions.get(OWNER, &id).unwrap();
    assert_eq!((info.checkpoint, info.checkpoints), (3, 4));
    assert_eq!((info.memory_bytes, info.lost), (60, None));
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 60);
}

#[tokio::test(start_paused = true)]
async fn a_rollback_returns_to_a_checkpoint_and_drops_the_later_ones() {
    let sessions = keeping(8, u64::MAX);
    let id = create(&sessions, Language::Javascript).unwrap().id;
    for value in [1, 2, 3] {
        exec(&sessions, &id, 1, Some(value), 100).await;
    }
    let info = sessions.rollback(OWNER, &id, 1, WAIT).await.unwrap();
    assert_eq!((info.checkpoint, info.checkpoints), (1, 2));
    assert_eq!(info.memory_bytes, 100);
    assert_eq!(sessions.counts()[&Language::Javascript].memory_bytes, 100);
    // The next exec starts from checkpoint 1's state and takes a new number.
    let (session, started) = exec(&sessions, &id, 7, Some(4), 100).await;
    assert_eq!((started, session.checkpoint), (Some(1), 4));
    let list = sessions.checkpoints(OWNER, &id, WAIT).await.unwrap();
    assert_eq!(list.last().unwrap().parent, Some(1));
    assert_eq!(numbers(&sessions, &id).await, [0, 1, 4]);
    // The dropped ones are gone, and the error says which are kept; nothing changes.
    match sessions.rollback(OWNER, &id, 3, WAIT).await {
        Err(error @ ExecError::CheckpointNotFound { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("no checkpoint 3; it keeps 0, 1 and 4"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(numbers(&sessions, &id).await, [0, 1, 4]);
    // Back to the start: the warm state again.
    sessions.rollback(OWNER, &id, 0, WAIT).await.unwrap();
    let (session, started) = exec(&sessions, &id, 8, Some(5), 100).await;
    assert_eq!((started, session.checkpoint), (None, 5));
    // Rolling back to where it is changes nothing.
    let info = sessions.rollback(OWNER, &id, 5, WAIT).await.unwrap();
    assert_eq!((info.checkpoint, info.checkpoints), (5, 2));
}

#[tokio::test(start_paused = true)]
async fn a_fork_from_a_checkpoint_starts_there_and_leaves_its_origin_as_it_was() {
    let sessions = keeping(8, u64::MAX);
    let origin = create(&sessions, Language::Python).unwrap().id;
    for value in [1, 2, 3] {
        exec(&sessions, &origin, 1, Some(value), 100).await;
    }
    let fork = sessions.fork(OWNER, &origin, Some(2), WAIT).await.unwrap();
    assert_eq!((fork.checkpoint, fork.checkpoints), (0, 1));
    assert_eq!(fork.memory_bytes, 100);
    // The fork shares checkpoint 2's image: counted once.
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 300);
    let (session, started) = exec(&sessions, &fork.id, 1, Some(9), 100).await;
    assert_eq!((started, session.checkpoint), (Some(2), 1));
    assert_eq!(numbers(&sessions, &origin).await, [0, 1, 2, 3]);
    let (_, started) = exec(&sessions, &origin, 1, Some(4), 100).await;
    assert_eq!(started, Some(3));
    assert!(matches!(
        sessions.fork(OWNER, &origin, Some(9), WAIT).await,
        Err(ExecError::CheckpointNotFound { checkpoint: 9, .. })
    ));
    assert_eq!(
        sessions.list(OWNER, &Labels::default()).len(),
        2,
        "a refused fork made nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn the_oldest_checkpoints_beyond_the_retention_are_dropped_never_the_newest() {
    // By count: three kept.
    let sessions = keeping(3, u64::MAX);
    let id = create(&sessions, Language::Python).unwrap().id;
    for value in 1..=5 {
        exec(&sessions, &id, 1, Some(value), 10).await;
    }
    assert_eq!(numbers(&sessions, &id).await, [3, 4, 5]);
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 30);

    // By bytes: 250 hold two of 100 (and the warm start, 0 bytes, until it is oldest).
    let sessions = keeping(10, 250);
    let id = create(&sessions, Language::Python).unwrap().id;
    exec(&sessions, &id, 1, Some(1), 100).await;
    exec(&sessions, &id, 1, Some(2), 100).await;
    assert_eq!(numbers(&sessions, &id).await, [0, 1, 2]);
    exec(&sessions, &id, 1, Some(3), 100).await;
    assert_eq!(numbers(&sessions, &id).await, [2, 3]);
    // One bigger than the whole retention is kept alone: it is the session's state.
    exec(&sessions, &id, 1, Some(4), 1000).await;
    assert_eq!(numbers(&sessions, &id).await, [4]);
    let (_, started) = exec(&sessions, &id, 1, Some(5), 10).await;
    assert_eq!(started, Some(4));
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 10);
}

#[tokio::test(start_paused = true)]
async fn a_save_that_fails_loses_that_exec_and_the_session_says_so_once() {
    let sessions = keeping(8, u64::MAX);
    let id = create(&sessions, Language::Python).unwrap().id;
    exec(&sessions, &id, 1, Some(1), 10).await;
    // The answer named checkpoint 2, but it was never saved.
    let (session, _) = exec(&sessions, &id, 2, None, 10).await;
    assert_eq!((session.checkpoint, session.lost), (2, None));
    let info = sessions.get(OWNER, &id).unwrap();
    let lost = Loss {
        restored_from_checkpoint: 1,
        lost_execs: 1,
    };
    assert_eq!((info.checkpoint, info.lost), (1, Some(lost)));
    assert_eq!(numbers(&sessions, &id).await, [0, 1]);
    // The next exec starts from checkpoint 1, says what was lost, and takes a new number.
    let (session, started) = exec(&sessions, &id, 3, Some(3), 10).await;
    assert_eq!(started, Some(1));
    assert_eq!((session.checkpoint, session.lost), (3, Some(lost)));
    // Said once: neither the session nor the exec after say it again.
    assert_eq!(sessions.get(OWNER, &id).unwrap().lost, None);
    let (session, _) = exec(&sessions, &id, 4, Some(4), 10).await;
    assert_eq!(session.lost, None);
}
