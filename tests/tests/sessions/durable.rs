//! Sessions kept in a state directory (`--state-dir`): they outlive a clean restart and a
//! `kill -9`, come back at their last checkpoint on disk and say what was lost; damaged
//! checkpoints and another build's are refused one by one, each with its reason; and many
//! more sessions than sandboxes leave memory and keep their own state.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hyperlightd_e2e::disk::{checkpoint_dir, inode, memory_blobs, own_blob, wait_durable};
use nix::sys::signal::Signal;

use super::*;

/// Where a test's daemons keep sessions and templates, across their restarts.
struct Dirs {
    state: tempfile::TempDir,
    snapshots: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs {
            state: tempfile::tempdir().unwrap(),
            snapshots: tempfile::tempdir().unwrap(),
        }
    }

    /// The daemon's arguments for these directories, then `extra`.
    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--state-dir",
            self.state.path().to_str().unwrap(),
            "--snapshot-dir",
            self.snapshots.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args
    }

    /// The directory of checkpoint `number` of session `id`.
    fn checkpoint(&self, id: &str, number: u64) -> PathBuf {
        checkpoint_dir(self.state.path(), id, number)
    }
}

/// Waits until checkpoint `number` of session `id` is on disk.
async fn durable(client: &Client, id: &str, number: u64) {
    wait_durable(client, id, number, Duration::from_secs(120)).await;
}

/// Stops `daemon` cleanly (SIGTERM: it saves and writes what it holds first).
async fn stop(mut daemon: Daemon) {
    daemon.signal(Signal::SIGTERM);
    assert_eq!(daemon.wait_exit(Duration::from_secs(180)).await, Some(0));
}

/// `x = {n}` in `language`, and writes `n.txt`.
fn set_x(language: Language, n: u64) -> String {
    match language {
        Language::Python => format!("x = {n}\nopen('{n}.txt', 'w').write('{n}')"),
        _ => format!("globalThis.x = {n}; files.write('{n}.txt', '{n}'); x"),
    }
}

#[tokio::test]
async fn sessions_outlive_a_clean_restart_and_a_kill_during_an_exec_and_say_what_was_lost() {
    const OTHER: (u32, u32) = (1000, 1000);
    let dirs = Dirs::new();
    let retention = [
        "--session-checkpoints",
        "4",
        "--session-checkpoint-mib",
        "4096",
    ];
    let daemon = both_languages(&dirs.args(&retention)).await;
    let client = daemon.client();
    let mut ids = Vec::new();
    for language in [Language::Python, Language::Javascript] {
        let labelled =
            CreateSessionRequest::new(language).with_label("language", language.to_string());
        let id = client.create_session(&labelled).await.unwrap().id;
        for n in 1..=2 {
            value(&client, &id, &set_x(language, n)).await;
        }
        durable(&client, &id, 2).await;
        ids.push((language, id));
    }
    // Health names the state directory and says writes reach it.
    let health = client
        .health()
        .await
        .unwrap()
        .durable
        .expect("health's durable part");
    assert_eq!(health.dir, dirs.state.path().to_str().unwrap());
    assert!(health.writing && health.failed_writes == 0, "{health:?}");
    let before = client.session(&ids[0].1).await.unwrap();
    stop(daemon).await;

    // A clean restart: the same sessions, at the same checkpoints, owners, limits and expiry.
    let daemon = both_languages(&dirs.args(&retention)).await;
    daemon.open_socket_to_everyone();
    let client = daemon.client();
    let after = client.session(&ids[0].1).await.unwrap();
    assert_eq!(
        (&after.created_at, &after.expires_at, after.idle_timeout_s),
        (
            &before.created_at,
            &before.expires_at,
            before.idle_timeout_s
        )
    );
    for (language, id) in &ids {
        let info = client.session(id).await.unwrap();
        assert_eq!((info.checkpoint, info.execs, info.lost_execs), (2, 2, 0));
        let wanted = BTreeMap::from([("language".to_owned(), language.to_string())]);
        let found = client.sessions_labelled(&wanted).await.unwrap();
        let found: Vec<&str> = found.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(found, [id.as_str()], "{language}: its labels kept on disk");
        assert!(info.durable && info.parked, "{language}: {info:?}");
        assert_eq!(value(&client, id, "x").await, json!(2), "{language}");
        // The state read back from disk is shared by the next checkpoint, not copied.
        let listed = client.session_checkpoints(id).await.unwrap();
        let newest = listed.last().unwrap();
        assert!(newest.bytes < 16 << 20, "{language}: {listed:?}");
        let files = client.session_files(id).await.unwrap();
        let paths: Vec<&str> = files.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["1.txt", "2.txt"], "{language}");
        // Another caller sees no such session after a restart either.
        let refused = daemon
            .hlctl_as(Some(OTHER), &["session", "show", id], "")
            .await;
        assert!(!refused.status.success(), "{refused:?}");
    }

    // An exec answered, the next one in the daemon (it runs until its limit, a minute), and
    // the daemon killed: the answered exec's state is back if its checkpoint reached the disk
    // first, and reported lost otherwise.
    for (language, id) in &ids {
        value(&client, id, &set_x(*language, 10)).await;
    }
    let pending: Vec<_> = ids
        .iter()
        .map(|(language, id)| {
            let forever = match language {
                Language::Python => "\nwhile True: pass",
                _ => "; for (;;) {}",
            };
            let request = SessionExecRequest {
                timeout_ms: Some(60_000),
                ..SessionExecRequest::new(set_x(*language, 11) + forever)
            };
            let (client, id) = (client.clone(), id.clone());
            tokio::spawn(async move { client.session_exec(&id, &request).await })
        })
        .collect();
    daemon
        .wait_for_metrics("both execs reach the daemon", |metrics| {
            hyperlightd_e2e::metric(metrics, "hyperlightd_executions_in_flight") >= 2.0
        })
        .await;
    let mut daemon = daemon;
    daemon.signal(Signal::SIGKILL);
    daemon.wait_exit(STEP_LIMIT).await;
    for task in pending {
        assert!(task.await.unwrap().is_err(), "no answer after the kill");
    }
    drop(daemon);
    // Checkpoint 3 was the read of x above, 4 the exec answered before the kill; a checkpoint
    // is in place whole or not at all, and they are written in order. The newest in place is
    // where the restart must be, and every answered one after it must be reported lost.
    let heads: Vec<u64> = ids
        .iter()
        .map(|(_, id)| {
            (2..=4)
                .rev()
                .find(|&n| dirs.checkpoint(id, n).is_dir())
                .unwrap()
        })
        .collect();

    let daemon = both_languages(&dirs.args(&retention)).await;
    let client = daemon.client();
    for ((language, id), head) in ids.iter().zip(heads) {
        let info = client.session(id).await.unwrap();
        let response = exec(&client, id, "x").await;
        let session = response.session.clone().unwrap();
        eprintln!("{language}: at the kill, the newest checkpoint on disk was {head} of 4");
        if head == 4 {
            assert_eq!(
                (info.checkpoint, info.lost_execs),
                (4, 0),
                "{language}: {info:?}"
            );
            assert_eq!(response.result, json!(10), "{language}");
            continue;
        }
        let lost = 4 - head;
        assert_eq!(
            (
                info.checkpoint,
                info.restored_from_checkpoint,
                info.lost_execs
            ),
            (head, Some(head), lost),
            "{language}: {info:?}"
        );
        assert_eq!(
            (session.restored_from_checkpoint, session.lost_execs),
            (Some(head), lost),
            "{language}: the next answer says so"
        );
        assert_eq!(response.result, json!(2), "{language}");
        let hlctl = daemon.hlctl(&["session", "exec", id, "-e", "1"], "").await;
        let stderr = String::from_utf8_lossy(&hlctl.stderr);
        assert!(
            hlctl.status.success() && !stderr.contains("lost"),
            "said once: {stderr}"
        );
    }
}

#[tokio::test]
async fn damaged_checkpoints_and_another_builds_are_refused_each_with_its_reason() {
    let dirs = Dirs::new();
    let daemon = both_languages(&dirs.args(&[])).await;
    let client = daemon.client();
    // Sessions at checkpoint 2: a JavaScript one whose state gets a flipped byte, one whose
    // state is cut short, a Python one with a flipped byte, and two left whole.
    let languages = [
        Language::Javascript,
        Language::Javascript,
        Language::Python,
        Language::Javascript,
        Language::Python,
    ];
    let mut ids = Vec::new();
    for language in languages {
        let id = new_session(&client, language).await;
        value(&client, &id, &set_x(language, 1)).await;
        value(&client, &id, &set_x(language, 2)).await;
        durable(&client, &id, 2).await;
        ids.push(id);
    }
    // On disk a checkpoint is its own pages, beside hard links to the files of the memory it
    // shares: its parent's own pages, named by digest, and the template's.
    for (id, language) in ids.iter().zip(languages) {
        let (first, second) = (dirs.checkpoint(id, 1), dirs.checkpoint(id, 2));
        let (parent, own) = (own_blob(&first), own_blob(&second));
        let shared: Vec<_> = memory_blobs(&second)
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert!(
            shared.contains(&parent.file_name().unwrap().to_owned()),
            "{language}: checkpoint 2 maps its parent's pages: {shared:?}"
        );
        let linked = second
            .join("state/oci/blobs/sha256")
            .join(parent.file_name().unwrap());
        assert_eq!(
            inode(&linked),
            inode(&parent),
            "{language}: linked, not copied"
        );
        let bytes = std::fs::metadata(&own).unwrap().len();
        eprintln!("{language}: checkpoint 2 of {id} holds {bytes} bytes of its own on disk");
        assert!(bytes < 16 << 20, "{language}: {bytes} bytes of its own");
    }
    // A JavaScript session whose parent's pages get a flipped byte: both checkpoints that have
    // them are refused.
    let parent_damaged = new_session(&client, Language::Javascript).await;
    value(&client, &parent_damaged, &set_x(Language::Javascript, 1)).await;
    value(&client, &parent_damaged, &set_x(Language::Javascript, 2)).await;
    durable(&client, &parent_damaged, 2).await;
    stop(daemon).await;
    let flip = |path: &Path| {
        use std::io::{Read, Seek, SeekFrom, Write};
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let at = file.metadata().unwrap().len() / 2;
        let mut byte = [0u8];
        file.seek(SeekFrom::Start(at)).unwrap();
        file.read_exact(&mut byte).unwrap();
        file.seek(SeekFrom::Start(at)).unwrap();
        file.write_all(&[byte[0] ^ 0x20]).unwrap();
    };
    flip(&own_blob(&dirs.checkpoint(&ids[0], 2)));
    let cut = own_blob(&dirs.checkpoint(&ids[1], 2));
    let cut_to = std::fs::metadata(&cut).unwrap().len() / 2;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .unwrap()
        .set_len(cut_to)
        .unwrap();
    flip(&own_blob(&dirs.checkpoint(&ids[2], 2)));
    flip(&own_blob(&dirs.checkpoint(&parent_damaged, 1)));

    let daemon = both_languages(&dirs.args(&[])).await;
    let client = daemon.client();
    for (id, reason) in ids.iter().zip(["corrupt", "truncated", "corrupt"]) {
        // Back at checkpoint 1, saying so; the damaged one is never loaded.
        let response = exec(&client, id, "x").await;
        assert_eq!(response.result, json!(1), "{reason}: {response:?}");
        let session = response.session.unwrap();
        assert_eq!(
            (
                session.restored_from_checkpoint,
                session.lost_execs,
                session.checkpoint
            ),
            (Some(1), 1, 3),
            "{reason}"
        );
        let started = Instant::now();
        while dirs.checkpoint(id, 2).exists() {
            assert!(started.elapsed() < STEP_LIMIT, "{reason}: not removed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for id in &ids[3..] {
        assert_eq!(value(&client, id, "x").await, json!(2));
    }
    // Checkpoint 2 is refused, then checkpoint 1: the session is back at its warm start.
    let response = exec(&client, &parent_damaged, "typeof x").await;
    assert_eq!(response.result, json!("undefined"), "{response:?}");
    let session = response.session.unwrap();
    assert_eq!(
        (session.restored_from_checkpoint, session.lost_execs),
        (Some(0), 2)
    );
    let refused = |reason: &str| {
        format!("hyperlightd_session_checkpoint_load_failures_total{{reason=\"{reason}\"}}")
    };
    assert_eq!(metric(&client, &refused("corrupt")).await, 4.0);
    assert_eq!(metric(&client, &refused("truncated")).await, 1.0);
    stop(daemon).await;

    // Another build of the daemon (a copy of its executable elsewhere), serving JavaScript
    // alone (the Python sessions stay on disk, untouched): every checkpoint it did not write is
    // refused; sessions go back to where they started, saying how much is lost.
    let other = tempfile::tempdir().unwrap();
    let copy = other.path().join("hyperlightd");
    std::fs::copy(hyperlightd_e2e::binary("hyperlightd"), &copy).unwrap();
    let mut args = vec!["--pool", "javascript=1"];
    args.extend(dirs.args(&[]));
    let daemon = Daemon::start_from(&copy, &args, &[], Duration::from_secs(600)).await;
    let client = daemon.client();
    let info = client.session(&ids[3]).await.unwrap();
    assert_eq!(
        (
            info.checkpoint,
            info.restored_from_checkpoint,
            info.lost_execs
        ),
        (0, Some(0), 3),
        "{info:?}"
    );
    let response = exec(&client, &ids[3], "typeof x").await;
    assert_eq!(
        response.result,
        json!("undefined"),
        "the warm state: {response:?}"
    );
    // Checkpoints 1 to 3 of each of the three JavaScript sessions (the read above made 3 in
    // the first two; the third is at 3 too), and the 3 of the one whose parent was damaged.
    assert_eq!(metric(&client, &refused("other_build")).await, 8.0);
    let python = dirs
        .state
        .path()
        .join("sessions")
        .join(&ids[4])
        .join("checkpoints");
    let kept = std::fs::read_dir(&python).unwrap().count();
    assert!(kept > 0, "a Python session is left alone, on disk");
}

#[tokio::test]
async fn two_hundred_parked_sessions_on_a_pool_of_two_each_keep_their_own_state() {
    const SESSIONS: u64 = 200;
    let dirs = Dirs::new();
    let args = dirs.args(&[
        "--pool",
        "javascript=2",
        "--guest-heap-mib",
        "8",
        "--max-sessions",
        "250",
        "--session-park-after-s",
        "0",
    ]);
    let daemon = Daemon::start(&args).await;
    let client = daemon.client();
    let mut ids = Vec::new();
    for n in 0..SESSIONS {
        let id = new_session(&client, Language::Javascript).await;
        let code = format!("var mine = {n}; files.write('mine.txt', '{n}'); mine");
        assert_eq!(value(&client, &id, &code).await, json!(n));
        ids.push(id);
    }
    for id in &ids {
        durable(&client, id, 1).await;
    }
    // Parked within a round of the reaper: no state is left in memory.
    let started = Instant::now();
    loop {
        let health = client.health().await.unwrap();
        let counts = health.sessions[&Language::Javascript];
        if counts.parked == SESSIONS as usize {
            assert_eq!(counts.memory_bytes, 0);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{counts:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each keeps its own: its files from its own checkpoint on disk, and, for one in ten, its
    // interpreter brought back and run on.
    for (n, id) in ids.iter().enumerate() {
        let file = client.session_file(id, "mine.txt").await.unwrap();
        assert_eq!(file, n.to_string().into_bytes());
        if n % 10 == 0 {
            assert_eq!(
                value(&client, id, "mine += 1000; mine").await,
                json!(n + 1000)
            );
        }
    }
    assert!(
        metric(
            &client,
            "hyperlightd_session_checkpoint_restore_seconds_count{language=\"javascript\"}"
        )
        .await
            >= 20.0
    );
    // A fork from a parked checkpoint, and a rollback to one, bring it back from disk.
    let fork = within(
        "fork",
        STEP_LIMIT,
        client.fork_session_at(&ids[20], Some(1)),
    )
    .await
    .unwrap();
    assert_eq!(value(&client, &fork.id, "mine").await, json!(20));
    let rolled = within("rollback", STEP_LIMIT, client.rollback_session(&ids[10], 1))
        .await
        .unwrap();
    assert_eq!(rolled.checkpoint, 1);
    assert_eq!(value(&client, &ids[10], "mine").await, json!(10));
    // Another caller can neither list, read nor roll back a session that is not its own.
    const OTHER: (u32, u32) = (1000, 1000);
    daemon.open_socket_to_everyone();
    for args in [
        ["session", "checkpoints", &ids[30], "--json"],
        ["session", "files", &ids[30], "mine.txt"],
        ["session", "rollback", &ids[30], "0"],
    ] {
        let refused = daemon.hlctl_as(Some(OTHER), &args, "").await;
        assert!(!refused.status.success(), "{args:?}: {refused:?}");
    }
    assert_eq!(value(&client, &ids[30], "mine").await, json!(1030));
}

/// Asked to keep sessions on disk, a daemon that could not tell which saved states fit it (here
/// its own executable is gone once it runs, as where /proc does not work) does not start and
/// serve sessions that would vanish at its next restart: exit 73, naming the cause.
#[tokio::test]
async fn a_daemon_that_could_not_keep_sessions_on_disk_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("hyperlightd");
    std::fs::copy(hyperlightd_e2e::binary("hyperlightd"), &copy).unwrap();
    let state = dir.path().join("state");
    let daemon = tokio::process::Command::new(&copy)
        .arg("--socket")
        .arg(dir.path().join("d.sock"))
        .args(["--pool", "javascript=1", "--state-dir"])
        .arg(&state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Spawned means executed: from here the daemon's executable is a deleted file.
    std::fs::remove_file(&copy).unwrap();
    let out = within(
        "the daemon's start",
        hyperlightd_e2e::STARTUP_LIMIT,
        daemon.wait_with_output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(73), "{stderr}");
    assert!(
        stderr.contains("javascript sessions cannot be kept there")
            && stderr.contains("cannot tell which saved session states fit"),
        "{stderr}"
    );
    assert!(!dir.path().join("d.sock").exists(), "no socket is left");
}
