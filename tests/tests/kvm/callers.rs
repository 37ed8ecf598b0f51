//! Callers told apart by the kernel's peer credentials: allow lists, per-caller quotas and the
//! audit log, with `hlctl` run as other users (the tests run as root in the VM).

use std::process::Output;

use super::*;

const ALICE: (u32, u32) = (1000, 1000);
const BOB: (u32, u32) = (1001, 1000);
const MALLORY: (u32, u32) = (1002, 1002);

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Waits, at most `limit`, until the executions in flight and the idle JavaScript sandboxes
/// satisfy `until`; fails naming `what` and the last figures otherwise.
async fn pool_reaches(
    daemon: &Daemon,
    limit: Duration,
    until: impl Fn(f64, f64) -> bool,
    what: &str,
) {
    let deadline = Instant::now() + limit;
    loop {
        let metrics = within("metrics", STEP_LIMIT, daemon.client().metrics())
            .await
            .unwrap();
        let running = metric(&metrics, "hyperlightd_executions_in_flight");
        let idle = metric(
            &metrics,
            r#"hyperlightd_pool_idle_sandboxes{language="javascript"}"#,
        );
        if until(running, idle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {running} in flight, {idle} idle"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn callers_are_allowed_refused_and_held_to_their_own_quota_and_each_run_is_audited() {
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.log");
    let audit_arg = audit.to_string_lossy().into_owned();
    let daemon = Daemon::start(&[
        "--pool",
        "javascript=2",
        "--allow-uid",
        "1000",
        "--allow-uid",
        "1001",
        "--max-execs-per-caller",
        "1",
        "--audit-log",
        &audit_arg,
    ])
    .await;
    daemon.open_socket_to_everyone();
    let exec = |code: &str| {
        vec!["exec", "--lang", "js", "--timeout-ms", "30000", "-e"]
            .into_iter()
            .chain([code])
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    let as_user = |user, code: &str| {
        let args = exec(code);
        let daemon = &daemon;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            daemon.hlctl_as(Some(user), &args, "").await
        }
    };

    // Not on the allow list: refused, whatever it asks.
    let refused = as_user(MALLORY, "console.log('mallory')").await;
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    assert!(
        stderr(&refused).contains("caller_not_allowed"),
        "{refused:?}"
    );
    assert!(stderr(&refused).contains("uid 1002"), "{refused:?}");

    // Alice runs a long program; a second one of hers is past her quota of one, while Bob,
    // another caller, is served by the pool's other sandbox.
    let busy = "const end = Date.now() + 6000; while (Date.now() < end) {} 'done'";
    let long = tokio::spawn({
        let socket = daemon.socket().to_owned();
        let args = exec(busy);
        async move {
            tokio::task::spawn_blocking(move || {
                hyperlightd_e2e::run_hlctl_as(Some(ALICE), &socket, &args, "")
            })
            .await
            .unwrap()
        }
    });
    pool_reaches(
        &daemon,
        Duration::from_secs(20),
        |running, _| running >= 1.0,
        "Alice's program in flight",
    )
    .await;
    let over = as_user(ALICE, "1").await;
    assert_eq!(over.status.code(), Some(4), "{over:?}");
    assert!(stderr(&over).contains("quota_exceeded"), "{over:?}");
    let bob = as_user(BOB, "console.log('bob')").await;
    assert!(bob.status.success(), "{bob:?}");
    assert_eq!(String::from_utf8_lossy(&bob.stdout), "bob\n");
    let alice = within("Alice's long program", STEP_LIMIT, long)
        .await
        .unwrap();
    assert!(alice.status.success(), "{alice:?}");
    assert_eq!(
        String::from_utf8_lossy(&alice.stdout),
        "\"done\"\n",
        "the result, as JSON"
    );
    // The daemon's own user (root here) is allowed without being listed.
    assert_eq!(run(&daemon, js("6 * 7")).await.result, json!(42));

    // One line per refusal and per run, each with the caller's credentials.
    let lines = audit_lines(&audit);
    let summary: Vec<String> = lines
        .iter()
        .map(|l| {
            let status = l["status"].as_str().unwrap_or("");
            format!(
                "{} {} {status}",
                l["audit"].as_str().unwrap(),
                l["caller"]["uid"]
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "denied 1002 ",
            "exec 1000 rejected",
            "exec 1001 ok",
            "exec 1000 ok",
            "exec 0 ok"
        ],
        "{lines:#?}"
    );
    let alice_line = &lines[3];
    assert!(
        alice_line["caller"]["pid"].as_i64().unwrap() > 1,
        "{alice_line}"
    );
    assert_eq!(alice_line["caller"]["gid"], 1000);
    assert_eq!(alice_line["language"], "javascript");
    assert_eq!(alice_line["code_bytes"], busy.len());
    assert!(
        alice_line["duration_ms"].as_f64().unwrap() >= 6000.0,
        "{alice_line}"
    );
    assert_eq!(lines[1]["error_kind"], "quota_exceeded");

    // Health reports the audit log and the quotas.
    let health = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    let audit_health = health.audit.unwrap();
    assert_eq!((audit_health.lines, audit_health.failed_lines), (5, 0));
    let limits = health.caller_limits.unwrap();
    assert_eq!(limits.max_execs[&Language::Javascript], 1);
    assert!(limits.allow_list);
}

/// Admission is work-conserving: with no `--max-execs-per-caller`, a caller alone may keep
/// every sandbox busy, and when several callers wait, the next free sandbox goes to the one with
/// the fewest running, so a flood does not keep another caller waiting behind it.
#[tokio::test]
async fn a_caller_alone_uses_the_whole_pool_and_a_flood_does_not_starve_another_caller() {
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.log");
    let audit_arg = audit.to_string_lossy().into_owned();
    let daemon = Daemon::start(&["--pool", "javascript=2", "--audit-log", &audit_arg]).await;
    daemon.open_socket_to_everyone();
    let health = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    assert!(health.caller_limits.unwrap().max_execs.is_empty(), "no cap");
    let spawn_as = |user: (u32, u32), code: String| {
        let socket = daemon.socket().to_owned();
        tokio::spawn(async move {
            let args =
                ["exec", "--lang", "js", "--timeout-ms", "60000", "-e", &code].map(str::to_owned);
            tokio::task::spawn_blocking(move || {
                hyperlightd_e2e::run_hlctl_as(Some(user), &socket, &args, "")
            })
            .await
            .unwrap()
        })
    };
    let busy = |ms: u32, tag: &str| {
        format!("const end = Date.now() + {ms}; while (Date.now() < end) {{}} '{tag}'")
    };

    // Alice alone: two programs at once take both sandboxes, neither refused.
    let alone: Vec<_> = (0..2)
        .map(|n| spawn_as(ALICE, busy(3000, &format!("alone{n}"))))
        .collect();
    let both_busy = |running: f64, idle: f64| running >= 2.0 && idle == 0.0;
    let minute = Duration::from_secs(60);
    let at_once = "both sandboxes busy with Alice's programs at once";
    pool_reaches(&daemon, minute, both_busy, at_once).await;
    for program in alone {
        let output = within("Alice's program", STEP_LIMIT, program)
            .await
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    }

    // Alice floods the pool: two long programs take both sandboxes, four short ones wait.
    // Bob's one program, sent while they do, is the next to get a sandbox: when one of the
    // long ones ends, Bob has none running and Alice one.
    let mut flood: Vec<_> = (0..2)
        .map(|n| spawn_as(ALICE, busy(12_000, &format!("long{n}"))))
        .collect();
    pool_reaches(&daemon, minute, both_busy, "Alice's long programs running").await;
    flood.extend((0..4).map(|n| spawn_as(ALICE, busy(200, &format!("short{n}")))));
    let flooded = |running: f64, _| running >= 6.0;
    pool_reaches(&daemon, minute, flooded, "Alice's flood in flight").await;
    let bob = within(
        "Bob's program",
        Duration::from_secs(120),
        spawn_as(BOB, "'bob'".to_owned()),
    )
    .await
    .unwrap();
    assert!(bob.status.success(), "{bob:?}");
    for program in flood {
        let output = within("Alice's flood", Duration::from_secs(120), program)
            .await
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    }
    // The audit log has a line per exec as it ends: Bob's comes after Alice's two long ones
    // at most, before her four short ones that waited before he came (first in, first out
    // would have run those four first).
    let uids: Vec<i64> = audit_lines(&audit)
        .iter()
        .filter(|line| line["audit"] == "exec")
        .map(|line| line["caller"]["uid"].as_i64().unwrap())
        .skip(2)
        .collect();
    let bob_at = uids.iter().position(|&uid| uid == i64::from(BOB.0));
    assert!(
        bob_at.is_some_and(|at| at <= 3),
        "exec lines by uid: {uids:?}"
    );
}
