//! Sessions kept in a state directory, with a fake worker and a fake guest whose state is a
//! number: read back by a new table as a restarted daemon does, at the same checkpoints, with
//! damaged checkpoints refused by reason, losses said, parked states brought back.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::job::{CheckpointInfo, FileIdentity, SessionRef, StateCodec, StateKey};

/// A guest whose state is a `u32`, written as eight digits in `state/value`, beside a blob of
/// its tens in `state/oci/blobs/sha256/<its SHA-256>`: states of the same tens share that blob
/// as real states share the memory of the one they were made from, and a blob that `existing`
/// finds is hard-linked, not written.
#[derive(Debug)]
struct Numbers(StateKey);

/// The blob of a state's tens, and its SHA-256.
fn tens_blob(value: u32) -> (String, Vec<u8>) {
    use sha2::Digest as _;
    let bytes = format!("tens {}", value / 10).into_bytes();
    let sha256 = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (sha256, bytes)
}

/// A state the fake guest's codec fails to write.
const UNWRITABLE: u32 = 666;

impl StateCodec for Numbers {
    fn key(&self) -> &StateKey {
        &self.0
    }

    fn write(
        &self,
        state: &SavedState,
        dir: &Path,
        existing: crate::job::ExistingBlob<'_>,
    ) -> Result<(), String> {
        let value = state.get::<u32>().ok_or("not a number")?;
        if *value == UNWRITABLE {
            return Err("the disk refused it".to_owned());
        }
        let blobs = dir.join("oci/blobs/sha256");
        fs::create_dir_all(&blobs).map_err(|e| e.to_string())?;
        let (sha256, bytes) = tens_blob(*value);
        match existing(&sha256) {
            Some(from) => fs::hard_link(from, blobs.join(&sha256)),
            None => fs::write(blobs.join(&sha256), bytes),
        }
        .map_err(|e| e.to_string())?;
        fs::write(dir.join("value"), format!("{value:08}")).map_err(|e| e.to_string())
    }

    fn read(&self, dir: &Path) -> Result<SavedState, String> {
        let text = fs::read_to_string(dir.join("value")).map_err(|e| e.to_string())?;
        let value: u32 = text.parse().map_err(|e| format!("{e}"))?;
        let (sha256, bytes) = tens_blob(value);
        let blob =
            fs::read(dir.join("oci/blobs/sha256").join(sha256)).map_err(|e| e.to_string())?;
        if blob != bytes {
            return Err("the blob of its tens is another's".to_owned());
        }
        Ok(SavedState::new(value))
    }
}

/// The key of the fake guest of daemon build `build`.
fn key(build: &str) -> StateKey {
    StateKey {
        format: 1,
        language: "javascript".to_owned(),
        daemon: build.to_owned(),
        executable: FileIdentity {
            path: PathBuf::from("/usr/bin/hyperlightd"),
            bytes: 1,
            modified_ns: 1,
        },
        sizes: "heap 64 MiB".to_owned(),
        files: Vec::new(),
    }
}

const WAIT: Duration = Duration::from_secs(5);

/// A daemon's table over the state directory `dir`, of build `build`, parking sessions idle for
/// `park_after`; its metrics.
fn daemon(dir: &Path, build: &str, park_after: Duration) -> (Arc<Sessions>, Metrics) {
    let metrics = Metrics::new().unwrap();
    let codec: Arc<dyn StateCodec> = Arc::new(Numbers(key(build)));
    let codecs = [(Language::Javascript, codec)].into();
    let durable = Durable::open(dir, codecs, metrics.sessions().durable, park_after, None).unwrap();
    let settings = SessionSettings {
        max_sessions: 16,
        max_per_caller: 16,
        max_checkpoints: 3,
        memory_budget: u64::MAX,
        ..settings()
    };
    let sessions = Sessions::new(
        settings,
        &[Language::Javascript],
        metrics.sessions(),
        audit_off(),
    )
    .with_durable(durable);
    let sessions = Arc::new(sessions);
    sessions.recover();
    (sessions, metrics)
}

/// Stops a daemon as `main` does: its last states saved and written.
fn stop(sessions: Arc<Sessions>) {
    assert!(sessions.flush(WAIT));
}

/// Runs an exec in `id` whose worker saves `value`; returns its answer's session part and the
/// state it started from.
async fn exec(sessions: &Arc<Sessions>, id: &str, value: u32) -> (SessionRef, Option<u32>) {
    let (started, saw) = oneshot::channel();
    let run = move |state: Option<SavedState>, _job| async move {
        started.send(seen(&state)).unwrap();
        Ok(saving(Some(value), 100))
    };
    let job = job(u64::from(value), clock::now() + WAIT, WAIT, Files::new());
    let outcome = exec_job(sessions, OWNER, id, job, run).await.unwrap();
    settled(sessions, id).await;
    (outcome.session.unwrap(), saw.await.unwrap())
}

/// The value a session's next exec starts from.
async fn state_of(sessions: &Arc<Sessions>, id: &str) -> Option<u32> {
    let session = sessions.find(OWNER, id).unwrap();
    let mut turn = sessions
        .turn(session, (clock::now() + WAIT, WAIT), 0, &Trace::off())
        .await
        .unwrap();
    let resume = turn.resume().await.unwrap();
    drop(turn);
    seen(&resume.map(|resume| resume.state))
}

/// A counter's value in the metrics, by its full series.
fn counter(metrics: &Metrics, series: &str) -> f64 {
    let text = metrics.render(&BTreeMap::new(), &BTreeMap::new()).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A new JavaScript session of the owner's in `sessions`.
fn create(sessions: &Arc<Sessions>) -> String {
    super::create(sessions, Language::Javascript).unwrap().id
}

/// The directory of checkpoint `number` of session `id` under the state directory `dir`.
fn checkpoint_dir(dir: &Path, id: &str, number: u64) -> PathBuf {
    dir.join("sessions")
        .join(id)
        .join("checkpoints")
        .join(number.to_string())
}

#[tokio::test]
async fn a_restarted_daemon_serves_the_same_sessions_at_the_same_checkpoints() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let id = create(&sessions);
    exec(&sessions, &id, 7).await;
    exec(&sessions, &id, 8).await;
    let before = sessions.get(OWNER, &id).unwrap();
    assert!(before.durable);
    stop(sessions);

    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    let after = sessions.get(OWNER, &id).unwrap();
    assert_eq!(
        (after.checkpoint, after.checkpoints, after.execs, after.lost),
        (2, 3, 2, None)
    );
    assert_eq!(after.created_at, before.created_at);
    assert_eq!(after.idle_timeout, before.idle_timeout);
    assert!(after.parked, "nothing is read until it is used");
    // The newest checkpoint's files are read from disk, and the state stays there.
    let head = sessions.head_files(OWNER, &id, WAIT).await.unwrap();
    assert_eq!(head.as_ref(), files_of(8).as_ref());
    assert!(sessions.get(OWNER, &id).unwrap().parked);
    let list = sessions.checkpoints(OWNER, &id, WAIT).await.unwrap();
    let numbers: Vec<(u64, bool)> = list.iter().map(|c| (c.number, c.durable)).collect();
    assert_eq!(numbers, [(0, false), (1, true), (2, true)]);
    assert!(matches!(
        sessions.get(&Principal::Uid(1001), &id),
        Err(ExecError::SessionNotFound(_))
    ));
    assert_eq!(state_of(&sessions, &id).await, Some(8));
    let (session, started) = exec(&sessions, &id, 9).await;
    assert_eq!(
        (session.checkpoint, session.lost, started),
        (3, None, Some(8))
    );
    let files = sessions.files(OWNER, &id, WAIT).await.unwrap();
    assert_eq!(files.as_ref(), files_of(9).as_ref());
    assert_eq!(
        counter(
            &metrics,
            "hyperlightd_sessions_recovered_total{outcome=\"intact\"}"
        ),
        1.0
    );
}

#[tokio::test]
async fn an_answered_exec_whose_checkpoint_never_reached_the_disk_is_reported_lost() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let id = create(&sessions);
    exec(&sessions, &id, 7).await;
    exec(&sessions, &id, 8).await;
    stop(sessions);
    // As after a kill between the answer (the journal names checkpoint 2) and its write.
    fs::remove_dir_all(checkpoint_dir(root.path(), &id, 2)).unwrap();

    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    let info = sessions.get(OWNER, &id).unwrap();
    let lost = info.lost.unwrap();
    assert_eq!((lost.restored_from_checkpoint, lost.lost_execs), (1, 1));
    assert_eq!(info.checkpoint, 1);
    let (session, started) = exec(&sessions, &id, 9).await;
    assert_eq!(started, Some(7), "back at checkpoint 1");
    assert_eq!(session.lost, Some(lost), "the next answer says so, once");
    assert_eq!(session.checkpoint, 3, "numbers are never reused");
    assert_eq!(sessions.get(OWNER, &id).unwrap().lost, None);
    assert_eq!(
        counter(
            &metrics,
            "hyperlightd_session_checkpoint_load_failures_total{reason=\"missing\"}"
        ),
        1.0
    );
    stop(sessions);
    // Said once: a second restart does not say it again.
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    assert_eq!(sessions.get(OWNER, &id).unwrap().lost, None);
    assert_eq!(state_of(&sessions, &id).await, Some(9));
}

#[tokio::test]
async fn damaged_checkpoints_are_refused_each_with_its_reason() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = create(&sessions);
        exec(&sessions, &id, 7).await;
        exec(&sessions, &id, 8).await;
        ids.push(id);
    }
    stop(sessions);
    let value = |id: &str| checkpoint_dir(root.path(), id, 2).join("state/value");
    // A flipped byte, a file cut short, a checkpoint another build wrote.
    let mut bytes = fs::read(value(&ids[0])).unwrap();
    bytes[7] ^= 0x01;
    fs::write(value(&ids[0]), bytes).unwrap();
    fs::write(value(&ids[1]), b"0000").unwrap();
    let record = checkpoint_dir(root.path(), &ids[2], 2).join("checkpoint.json");
    let text = fs::read_to_string(&record).unwrap();
    fs::write(
        &record,
        text.replace("\"daemon\": \"1\"", "\"daemon\": \"0\""),
    )
    .unwrap();

    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    for (id, reason) in ids.iter().zip(["corrupt", "truncated", "other_build"]) {
        // Each goes back to checkpoint 1, and says so.
        assert_eq!(state_of(&sessions, id).await, Some(7), "{reason}");
        let lost = sessions.get(OWNER, id).unwrap().lost.unwrap();
        assert_eq!((lost.restored_from_checkpoint, lost.lost_execs), (1, 1));
        let series =
            format!("hyperlightd_session_checkpoint_load_failures_total{{reason=\"{reason}\"}}");
        assert_eq!(counter(&metrics, &series), 1.0, "{reason}");
        // Its removal is the writer's, in the order of what was handed to it.
        assert!(sessions.flush(WAIT));
        assert!(!checkpoint_dir(root.path(), id, 2).exists(), "removed");
    }
}

#[tokio::test]
async fn a_session_none_of_whose_checkpoints_fits_is_lost_and_says_why() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let origin = create(&sessions);
    exec(&sessions, &origin, 7).await;
    let fork = sessions.fork(OWNER, &origin, None, WAIT).await.unwrap().id;
    stop(sessions);

    // Another build: the fork's only checkpoint does not fit; the origin keeps its warm start.
    let (sessions, metrics) = daemon(root.path(), "2", Duration::MAX);
    let lost = sessions.get(OWNER, &fork).unwrap();
    assert!(lost.gone.unwrap().contains("other_build"));
    let session = sessions.find(OWNER, &fork).unwrap();
    match sessions
        .turn(session, (clock::now() + WAIT, WAIT), 1, &Trace::off())
        .await
    {
        Err(ExecError::SessionLost { id, .. }) => assert_eq!(id, fork),
        other => panic!("{other:?}"),
    }
    assert_eq!(state_of(&sessions, &origin).await, None, "the warm state");
    assert_eq!(
        counter(
            &metrics,
            "hyperlightd_sessions_recovered_total{outcome=\"lost\"}"
        ),
        1.0
    );
    let lost = sessions.get(OWNER, &origin).unwrap().lost.unwrap();
    assert_eq!((lost.restored_from_checkpoint, lost.lost_execs), (0, 1));
    sessions.delete(OWNER, &fork).unwrap();
    assert!(sessions.flush(WAIT));
    assert!(!root.path().join("sessions").join(&fork).exists());
}

#[tokio::test]
async fn rollback_fork_and_retention_outlive_the_daemon() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let id = create(&sessions);
    for value in [1, 2, 3, 4] {
        exec(&sessions, &id, value).await;
    }
    // Three kept: 2, 3 and 4; checkpoints 0 and 1 are gone from disk too.
    let fork = sessions.fork(OWNER, &id, Some(3), WAIT).await.unwrap().id;
    sessions.rollback(OWNER, &id, 2, WAIT).await.unwrap();
    stop(sessions);
    for gone in [1, 3, 4] {
        assert!(!checkpoint_dir(root.path(), &id, gone).exists(), "{gone}");
    }

    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let numbers = |list: Vec<CheckpointInfo>| list.iter().map(|c| c.number).collect::<Vec<_>>();
    let kept = sessions.checkpoints(OWNER, &id, WAIT).await.unwrap();
    assert_eq!(numbers(kept), [2]);
    assert_eq!(state_of(&sessions, &id).await, Some(2));
    assert_eq!(state_of(&sessions, &fork).await, Some(3));
    let (session, _) = exec(&sessions, &id, 5).await;
    assert_eq!(session.checkpoint, 5, "after 4, though rolled back past it");
}

#[tokio::test]
async fn idle_sessions_leave_memory_and_come_back_on_use() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, metrics) = daemon(root.path(), "1", Duration::ZERO);
    let mut ids = Vec::new();
    for value in 0..5 {
        let id = create(&sessions);
        exec(&sessions, &id, value).await;
        ids.push(id);
    }
    assert!(sessions.flush(WAIT));
    assert_eq!(sessions.counts()[&Language::Javascript].memory_bytes, 500);
    sessions.park_idle();
    let counts = sessions.counts()[&Language::Javascript];
    assert_eq!((counts.memory_bytes, counts.parked), (0, 5));
    for (value, id) in (0..).zip(&ids) {
        assert!(sessions.get(OWNER, id).unwrap().parked);
        let (_, started) = exec(&sessions, id, value + 10).await;
        assert_eq!(started, Some(value), "its own state");
    }
    assert_eq!(
        counter(
            &metrics,
            "hyperlightd_session_checkpoint_restore_seconds_count{language=\"javascript\"}"
        ),
        5.0
    );
}

/// The blob file of checkpoint `number` of session `id`.
fn blob_of(dir: &Path, id: &str, number: u64) -> PathBuf {
    let blobs = checkpoint_dir(dir, id, number).join("state/oci/blobs/sha256");
    let mut found: Vec<PathBuf> = fs::read_dir(blobs)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// The disk the files of the checkpoint directories under `dir` take, each file once (their
/// records aside, which the gauge leaves out).
fn disk_of_checkpoints(dir: &Path) -> f64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashMap::new();
    let mut pending = vec![dir.join("sessions")];
    while let Some(at) = pending.pop() {
        for entry in fs::read_dir(&at).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            let path = entry.path();
            let in_checkpoint = path.components().any(|c| c.as_os_str() == "checkpoints");
            if meta.is_dir() {
                pending.push(path);
            } else if in_checkpoint && entry.file_name() != "checkpoint.json" {
                seen.insert((meta.dev(), meta.ino()), meta.blocks() * 512);
            }
        }
    }
    seen.values().sum::<u64>() as f64
}

#[tokio::test]
async fn checkpoints_link_the_blobs_they_share_and_the_disk_counts_each_once() {
    use std::os::unix::fs::MetadataExt;
    const DISK: &str = "hyperlightd_session_checkpoint_disk_bytes";
    let root = tempfile::tempdir().unwrap();
    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    let id = create(&sessions);
    exec(&sessions, &id, 71).await;
    exec(&sessions, &id, 72).await;
    assert!(sessions.flush(WAIT));
    let inode = |n| fs::metadata(blob_of(root.path(), &id, n)).unwrap().ino();
    assert_eq!(inode(1), inode(2), "72 links the blob of 71's tens");
    exec(&sessions, &id, 81).await;
    assert!(sessions.flush(WAIT));
    assert_ne!(inode(3), inode(2), "81's tens are its own");
    let fork = sessions.fork(OWNER, &id, Some(2), WAIT).await.unwrap().id;
    exec(&sessions, &fork, 79).await;
    assert!(sessions.flush(WAIT));
    assert_eq!(
        inode(2),
        fs::metadata(blob_of(root.path(), &fork, 1)).unwrap().ino()
    );
    assert_eq!(counter(&metrics, DISK), disk_of_checkpoints(root.path()));
    assert!(counter(&metrics, DISK) > 0.0);

    // The origin's checkpoints that the fork shares go, and the fork stays whole: the disk is
    // given back for the files no checkpoint has any more, and only those.
    sessions.rollback(OWNER, &id, 1, WAIT).await.unwrap();
    sessions.delete(OWNER, &id).unwrap();
    assert!(sessions.flush(WAIT));
    assert!(!root.path().join("sessions").join(&id).exists());
    assert_eq!(counter(&metrics, DISK), disk_of_checkpoints(root.path()));
    stop(sessions);

    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    assert_eq!(counter(&metrics, DISK), disk_of_checkpoints(root.path()));
    assert_eq!(state_of(&sessions, &fork).await, Some(79));
    exec(&sessions, &fork, 75).await;
    assert!(sessions.flush(WAIT));
    let fork_inode = |n| fs::metadata(blob_of(root.path(), &fork, n)).unwrap().ino();
    assert_eq!(fork_inode(2), fork_inode(1), "found again after a restart");
    sessions.delete(OWNER, &fork).unwrap();
    assert!(sessions.flush(WAIT));
    assert_eq!(counter(&metrics, DISK), 0.0);
}

#[tokio::test]
async fn a_damaged_blob_is_refused_in_every_checkpoint_that_shares_it() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let id = create(&sessions);
    for value in [61, 71, 72] {
        exec(&sessions, &id, value).await;
    }
    stop(sessions);
    // A flipped byte in the blob checkpoint 2 wrote, which checkpoint 3 links.
    let blob = blob_of(root.path(), &id, 2);
    let mut bytes = fs::read(&blob).unwrap();
    bytes[0] ^= 0x01;
    fs::write(&blob, bytes).unwrap();

    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    assert_eq!(
        state_of(&sessions, &id).await,
        Some(61),
        "back before the damage"
    );
    let lost = sessions.get(OWNER, &id).unwrap().lost.unwrap();
    assert_eq!((lost.restored_from_checkpoint, lost.lost_execs), (1, 2));
    let series = "hyperlightd_session_checkpoint_load_failures_total{reason=\"corrupt\"}";
    assert_eq!(counter(&metrics, series), 2.0, "each said");
}

/// The labels `conversation=c-7`.
fn conversation() -> Labels {
    Labels::new(BTreeMap::from([(
        "conversation".to_owned(),
        "c-7".to_owned(),
    )]))
    .unwrap()
}

#[tokio::test]
async fn labels_and_env_outlive_the_daemon_and_a_fork_has_its_origins() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let labels = conversation();
    let env = Env::new(BTreeMap::from([("MODE".to_owned(), "kept".to_owned())])).unwrap();
    let id = sessions
        .create(
            OWNER,
            Language::Javascript,
            None,
            labels.clone(),
            env.clone(),
        )
        .unwrap()
        .id;
    exec(&sessions, &id, 1).await;
    let fork = sessions.fork(OWNER, &id, None, WAIT).await.unwrap();
    assert_eq!((&fork.labels, &fork.env), (&labels, &env));
    let unlabelled = create(&sessions);
    stop(sessions);

    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let restored = sessions.get(OWNER, &id).unwrap();
    assert_eq!((&restored.labels, &restored.env), (&labels, &env));
    assert_eq!(sessions.get(OWNER, &fork.id).unwrap().env, env);
    assert!(sessions.get(OWNER, &unlabelled).unwrap().env.is_empty());
    let found: Vec<String> = sessions
        .list(OWNER, &labels)
        .into_iter()
        .map(|s| s.id)
        .collect();
    let mut expected = vec![id, fork.id];
    expected.sort_by_key(|id| sessions.get(OWNER, id).unwrap().created_at);
    assert_eq!(found, expected);
    assert_eq!(sessions.list(OWNER, &Labels::default()).len(), 3);
    assert!(sessions.get(OWNER, &unlabelled).unwrap().labels.is_empty());
}

#[tokio::test]
async fn an_idle_timeout_set_again_outlives_the_daemon() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let id = create(&sessions);
    exec(&sessions, &id, 1).await;
    let untouched = create(&sessions);
    let before = sessions.get(OWNER, &untouched).unwrap().idle_timeout;
    let set = Duration::from_secs(42);
    assert_eq!(
        sessions
            .set_idle_timeout(OWNER, &id, set)
            .unwrap()
            .idle_timeout,
        set
    );
    stop(sessions);

    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    assert_eq!(sessions.get(OWNER, &id).unwrap().idle_timeout, set);
    assert_eq!(
        sessions.get(OWNER, &untouched).unwrap().idle_timeout,
        before
    );
    assert_ne!(before, set);
}

#[tokio::test]
async fn a_saved_session_whose_labels_break_the_rules_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let id = sessions
        .create(
            OWNER,
            Language::Javascript,
            None,
            conversation(),
            Default::default(),
        )
        .unwrap()
        .id;
    stop(sessions);
    let file = root.path().join("sessions").join(&id).join("session.json");
    let text = fs::read_to_string(&file).unwrap();
    assert!(text.contains(r#""c-7""#), "{text}");
    fs::write(&file, text.replace(r#""c-7""#, r#""c\n7""#)).unwrap();

    let (sessions, metrics) = daemon(root.path(), "1", Duration::MAX);
    assert!(matches!(
        sessions.get(OWNER, &id),
        Err(ExecError::SessionNotFound(_))
    ));
    assert_eq!(
        counter(
            &metrics,
            "hyperlightd_sessions_recovered_total{outcome=\"unreadable\"}"
        ),
        1.0
    );
    assert!(!file.exists(), "an unreadable session is removed");
}

#[tokio::test]
async fn a_session_parked_now_waits_for_its_write_and_comes_back_on_use() {
    let root = tempfile::tempdir().unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let fresh = create(&sessions);
    let info = sessions.park_now(OWNER, &fresh, WAIT).await.unwrap();
    assert!(!info.parked, "a session that ran nothing holds nothing");

    let id = create(&sessions);
    exec(&sessions, &id, 7).await;
    let parked = sessions.park_now(OWNER, &id, WAIT).await.unwrap();
    assert!(parked.parked, "{parked:?}");
    let head = sessions.head_files(OWNER, &id, WAIT).await.unwrap();
    assert_eq!(
        head.as_ref(),
        files_of(7).as_ref(),
        "read from disk while parked"
    );
    assert!(
        checkpoint_dir(root.path(), &id, 1).exists(),
        "its state is on disk"
    );
    // The writer lets go of the state it wrote when its job ends, a moment after it said the
    // state was on disk.
    assert!(sessions.flush(WAIT));
    assert_eq!(sessions.counts()[&Language::Javascript].memory_bytes, 0);
    let (_, started) = exec(&sessions, &id, 8).await;
    assert_eq!(started, Some(7), "brought back on use");

    // A state the disk refuses is not parked: it stays in memory, and says why.
    exec(&sessions, &id, UNWRITABLE).await;
    let refused = sessions.park_now(OWNER, &id, WAIT).await;
    assert!(
        matches!(refused, Err(ExecError::ParkFailed(ref why)) if why.contains("the disk refused it")),
        "{refused:?}"
    );
    assert!(!sessions.get(OWNER, &id).unwrap().parked);
    // Health says so too, not only the log, until a write succeeds again.
    let health = sessions.durable_health().unwrap();
    assert_eq!(health.dir, root.path());
    let writes = health.writes;
    assert!(writes.failing && writes.failed == 1, "{writes:?}");
    let why = writes.last_error.unwrap();
    assert!(why.contains("the disk refused it"), "{why}");
    let (_, started) = exec(&sessions, &id, 9).await;
    assert_eq!(started, Some(UNWRITABLE));
    assert!(sessions.flush(WAIT));
    let writes = sessions.durable_health().unwrap().writes;
    assert!(!writes.failing && writes.failed == 1, "{writes:?}");
}

mod recover_fuzz;
