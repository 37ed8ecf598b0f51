use std::sync::Arc;

use serde_json::{Value, json};

use super::testing::{lines, log_in};
use super::*;

fn caller() -> Caller {
    Caller {
        uid: 1000,
        gid: 1001,
        pid: Some(4242),
        pod: crate::job::PodOf::Unread,
        on_behalf_of: None,
    }
}

fn exec_of<'a>(code: &'a Code, session: Option<&'a str>) -> ExecRecord<'a> {
    ExecRecord {
        request_id: 7,
        caller: caller(),
        language: Language::Python,
        session,
        checkpoint: None,
        code,
        status: "error",
        error_kind: Some(ErrorKind::Exception),
        duration_ms: 12.5,
        queued_ms: 0.25,
        output_bytes: 30,
        truncated: false,
        tool_calls: None,
        trace_id: None,
    }
}

#[test]
fn an_exec_line_says_who_ran_what_and_how_it_ended_with_the_code_only_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let (log, path) = log_in(&dir, false);
    let code = log.code("abc");
    log.exec(&exec_of(&code, Some("s1")));
    let [line] = lines(&path).try_into().unwrap();
    let time = line["time"].as_str().unwrap();
    assert!(time.ends_with('Z') && time.len() >= 20, "{time}");
    let mut rest = line.clone();
    rest.as_object_mut().unwrap().remove("time");
    assert_eq!(
        rest,
        json!({
            "audit": "exec", "request_id": 7,
            "caller": {"uid": 1000, "gid": 1001, "pid": 4242},
            "language": "python", "session": "s1",
            "code_sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "code_bytes": 3, "status": "error", "error_kind": "exception",
            "duration_ms": 12.5, "queued_ms": 0.25, "output_bytes": 30, "truncated": false
        })
    );
    let health = log.health().unwrap();
    assert_eq!((health.lines, health.failed_lines), (1, 0));
    assert_eq!(health.destination, path.display().to_string());
}

#[test]
fn the_code_itself_only_when_asked_and_a_line_is_appended_to_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("audit.log"), "{\"earlier\": true}\n").unwrap();
    let (log, path) = log_in(&dir, true);
    let code = log.code("print('a\"b')\n");
    log.exec(&exec_of(&code, None));
    let lines = lines(&path);
    assert_eq!(lines[0], json!({"earlier": true}));
    assert_eq!(lines[1]["code"], json!("print('a\"b')\n"));
    assert_eq!(lines[1]["session"], Value::Null);
}

#[test]
fn a_new_file_is_created_readable_by_its_group_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (_log, path) = log_in(&dir, false);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o137,
        0,
        "no group write, nothing for others: {mode:o}"
    );
}

#[test]
fn session_events_and_refusals_have_lines_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let (log, path) = log_in(&dir, false);
    log.session(
        "session_forked",
        &SessionRecord {
            request_id: Some(3),
            caller: Some(caller()),
            owner: Owner(&Principal::Uid(1000)),
            session: "new",
            language: Language::Javascript,
            from: Some("old"),
            reason: None,
            checkpoint: None,
        },
    );
    log.session(
        "session_expired",
        &SessionRecord {
            request_id: None,
            caller: None,
            owner: Owner(&Principal::Pod("pod-a".into())),
            session: "new",
            language: Language::Javascript,
            from: None,
            reason: Some("idle"),
            checkpoint: None,
        },
    );
    log.denied(&DeniedRecord {
        request_id: 4,
        caller: caller(),
        method: "POST",
        path: "/v1/exec",
        peer: None,
    });
    let lines = lines(&path);
    assert_eq!(lines[0]["audit"], "session_forked");
    assert_eq!(lines[0]["from"], "old");
    assert_eq!(lines[0]["owner_uid"], 1000);
    assert_eq!(lines[1]["audit"], "session_expired");
    assert_eq!(lines[1]["owner_pod"], "pod-a");
    assert!(lines[1].get("owner_uid").is_none(), "{}", lines[1]);
    assert_eq!(lines[1]["reason"], "idle");
    assert!(lines[1].get("caller").is_none(), "{}", lines[1]);
    assert_eq!(lines[2]["audit"], "denied");
    assert_eq!(lines[2]["path"], "/v1/exec");
}

#[test]
fn lines_written_at_once_from_many_threads_stay_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (log, path) = log_in(&dir, true);
    let log = Arc::new(log);
    let big = "x".repeat(100_000);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let (log, big) = (log.clone(), &big);
            scope.spawn(move || {
                for _ in 0..20 {
                    let code = log.code(big);
                    log.exec(&exec_of(&code, None));
                }
            });
        }
    });
    let lines = lines(&path);
    assert_eq!(lines.len(), 160);
    assert!(lines.iter().all(|l| l["code_bytes"] == 100_000));
}

#[test]
fn a_full_disk_loses_lines_but_not_the_daemon_and_health_says_why() {
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let options = AuditOptions {
        audit_log: Some("/dev/full".into()),
        audit_code: false,
    };
    let metrics = crate::metrics::Metrics::new().unwrap();
    let log = AuditLog::open(&options)
        .unwrap()
        .with_metrics(metrics.audit());
    let code = log.code("1");
    log.exec(&exec_of(&code, None));
    log.exec(&exec_of(&code, None));
    let health = log.health().unwrap();
    assert_eq!((health.lines, health.failed_lines), (0, 2));
    assert!(
        health
            .last_error
            .as_deref()
            .unwrap()
            .contains("No space left"),
        "{health:?}"
    );
    assert_eq!(metrics.audit().with_label_values(&["failed"]).get(), 2);
}

#[test]
fn an_unopenable_file_is_refused_at_startup_with_its_path() {
    let options = AuditOptions {
        audit_log: Some("/nonexistent-dir/audit.log".into()),
        audit_code: false,
    };
    let error = AuditLog::open(&options).unwrap_err().to_string();
    assert!(error.contains("/nonexistent-dir/audit.log"), "{error}");
    assert!(error.contains("--audit-log"), "{error}");
}

#[test]
fn without_a_destination_nothing_is_written_or_reported() {
    let log = AuditLog::off();
    log.exec(&exec_of(&log.code("1"), None));
    assert!(!log.is_on());
    assert_eq!(log.health(), None);
}
