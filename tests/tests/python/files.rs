//! Files in and out (issue 16): a request's files are the program's working directory in both
//! languages, what it writes comes back, the caps hold, paths cannot leave the directory, and a
//! session keeps its files through rollback and fork, and has them changed between execs.

use hyperlightd_client::{
    CreateSessionRequest, Error, FileChange, FileData, FileMap, SessionExecRequest, SessionInfo,
};

use super::*;

fn text(content: &str) -> FileData {
    FileData::Text(content.to_owned())
}

fn with_files(language: Language, code: &str, files: &[(&str, FileData)]) -> ExecRequest {
    ExecRequest {
        files: files
            .iter()
            .map(|(path, data)| ((*path).to_owned(), data.clone()))
            .collect(),
        ..ExecRequest::new(language, code)
    }
}

const PYTHON_FILES: &str = r#"
import csv, json, os, pathlib
rows = list(csv.DictReader(open('data.csv')))
total = sum(int(r['n']) for r in rows)
os.makedirs('out', exist_ok=True)
with open('out/summary.json', 'w') as f:
    json.dump({'rows': len(rows), 'total': total}, f)
raw = pathlib.Path('bin/raw.dat').read_bytes()
pathlib.Path('bin/raw.dat').write_bytes(raw + b'\xfe')
pathlib.Path('scratch.txt').write_text('gone')
os.remove('scratch.txt')
{'cwd': os.getcwd(), 'listed': sorted(os.listdir('.')), 'raw': list(raw)}
"#;

const PYTHON_ESCAPES: &str = r#"
import os
def attempt(f):
    try:
        f()
        return 'ok'
    except Exception as e:
        return type(e).__name__
{
    'dotdot': attempt(lambda: open('../escape.txt', 'w')),
    'dotdot_read': attempt(lambda: open('out/../../python/os.py').read()),
    'absolute': attempt(lambda: open('/etc/passwd').read()),
    'through_work': attempt(lambda: open('/work/../0/evil.py', 'w')),
    'symlink': attempt(lambda: os.symlink('data.csv', 'link')),
    'control': attempt(lambda: open('a\x01b', 'w')),
    'rmdir_root': attempt(lambda: os.rmdir('/work')),
}
"#;

const JS_FILES: &str = r#"
const data = JSON.parse(files.read("data.json"));
files.write("out/r.txt", "n=" + data.n * 2);
files.write("b.bin", new Uint8Array([0, 255]));
const codes = {};
for (const [name, f] of Object.entries({
  dotdot: () => files.read("../etc/passwd"),
  absolute: () => files.read("/etc/passwd"),
  missing: () => files.read("nope.txt"),
  control: () => files.write("a\u0001b", "x"),
})) {
  try { f(); codes[name] = "ok"; } catch (e) { codes[name] = e.code; }
}
({ listed: files.list().map((f) => f.path), exists: files.exists("out"), codes })
"#;

#[tokio::test]
async fn files_go_in_and_come_back_in_both_languages_and_paths_stay_inside() {
    let daemon = Daemon::start_with_python(&["javascript=1", "python=1"], &[]).await;
    let raw = FileData::Binary {
        base64: "AP8B".to_owned(), // 0, 255, 1
    };
    let request = with_files(
        Language::Python,
        PYTHON_FILES,
        &[("data.csv", text("n\n1\n2\n39\n")), ("bin/raw.dat", raw)],
    );
    let python = run(&daemon, request).await;
    assert_eq!(python.status, ExecStatus::Ok, "{python:?}");
    assert_eq!(
        python.result,
        json!({"cwd": "/work", "listed": ["bin", "data.csv", "out"], "raw": [0, 255, 1]})
    );
    let expected: FileMap = [
        (
            "bin/raw.dat".to_owned(),
            FileData::from_bytes(vec![0, 255, 1, 254]),
        ),
        (
            "out/summary.json".to_owned(),
            text(r#"{"rows": 3, "total": 42}"#),
        ),
    ]
    .into();
    assert_eq!(python.files, expected, "only what changed comes back");

    let request = with_files(Language::Python, PYTHON_ESCAPES, &[("data.csv", text(""))]);
    let escapes = run(&daemon, request).await;
    assert_eq!(escapes.status, ExecStatus::Ok, "{escapes:?}");
    let refused = escapes.result.as_object().unwrap();
    for (attempt, exception) in refused {
        assert_ne!(exception, "ok", "{attempt} was let through: {refused:?}");
    }
    assert_eq!(refused["dotdot"], "PermissionError", "{refused:?}");
    assert_eq!(refused["absolute"], "FileNotFoundError", "{refused:?}");
    assert_eq!(refused["symlink"], "PermissionError", "{refused:?}");
    assert!(escapes.files.is_empty(), "{:?}", escapes.files);

    let request = with_files(
        Language::Javascript,
        JS_FILES,
        &[("data.json", text(r#"{"n": 21}"#))],
    );
    let js = run(&daemon, request).await;
    assert_eq!(js.status, ExecStatus::Ok, "{js:?}");
    assert_eq!(
        js.result,
        json!({
            "listed": ["b.bin", "data.json", "out/r.txt"],
            "exists": true,
            "codes": {"dotdot": "EPERM", "absolute": "EPERM", "missing": "ENOENT", "control": "EINVAL"},
        })
    );
    let expected: FileMap = [
        ("b.bin".to_owned(), FileData::from_bytes(vec![0, 255])),
        ("out/r.txt".to_owned(), text("n=42")),
    ]
    .into();
    assert_eq!(js.files, expected);

    // Nothing of one request's files is left for the next.
    let next = run(&daemon, py("import os\nos.listdir('.')")).await;
    assert_eq!(next.result, json!([]), "{next:?}");
    let next = run(
        &daemon,
        ExecRequest::new(Language::Javascript, "files.list()"),
    )
    .await;
    assert_eq!(next.result, json!([]), "{next:?}");
}

#[tokio::test]
async fn the_caps_on_files_hold_with_a_clear_error() {
    let caps = ["--max-files", "4", "--max-file-bytes", "1000"];
    let daemon = Daemon::start_with_python(&["javascript=1", "python=1"], &caps).await;
    for (language, code) in [
        (
            Language::Python,
            "with open('big.txt', 'w') as f:\n    f.write('x' * 1001)",
        ),
        (
            Language::Javascript,
            "files.write('big.txt', 'x'.repeat(1001))",
        ),
        (
            Language::Python,
            "for i in range(5):\n    open(f'f{i}.txt', 'w').write('x')",
        ),
    ] {
        let response = run(&daemon, ExecRequest::new(language, code)).await;
        assert_eq!(response.status, ExecStatus::Error, "{code}: {response:?}");
        let error = response.error.unwrap();
        assert_eq!(error.kind, ErrorKind::FileLimit, "{code}: {error:?}");
        assert!(error.message.contains("cap of"), "{error:?}");
        assert!(response.files.is_empty());
    }
    // A program that handles the refusal goes on; what it wrote within the caps comes back.
    let handled = "try:\n    with open('a.txt', 'w') as f:\n        f.write('x' * 2000)\n\
                   except OSError:\n    open('note.txt', 'w').write('refused')";
    let response = run(&daemon, py(handled)).await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    assert_eq!(response.files["note.txt"], text("refused"));
    assert!(
        response.stderr.contains("hyperlightd: a write was refused"),
        "the refusal is said: {response:?}"
    );

    let client = daemon.client();
    let five: Vec<(String, FileData)> = (0..5).map(|i| (format!("f{i}"), text("x"))).collect();
    let too_many = ExecRequest {
        files: five.into_iter().collect(),
        ..py("1")
    };
    let big = with_files(Language::Python, "1", &[("a", text(&"x".repeat(1001)))]);
    let escape = with_files(Language::Python, "1", &[("../a", text("x"))]);
    let clash = with_files(Language::Python, "1", &[("a", text("")), ("a/b", text(""))]);
    for (request, kind) in [
        (too_many, ErrorKind::PayloadTooLarge),
        (big, ErrorKind::PayloadTooLarge),
        (escape, ErrorKind::InvalidRequest),
        (clash, ErrorKind::InvalidRequest),
    ] {
        match within("exec", STEP_LIMIT, client.exec(&request)).await {
            Err(Error::Rejected { error, .. }) => assert_eq!(error.kind, kind, "{error:?}"),
            other => panic!("{:?}: not refused: {other:?}", request.files.keys()),
        }
    }
}

async fn session_exec(
    daemon: &Daemon,
    id: &str,
    code: &str,
    files: &[(&str, FileData)],
) -> hyperlightd_client::ExecResponse {
    // Waiting for the previous exec's state to be saved counts: seconds under emulation.
    let timeout_ms = if code.contains("999") { 5_000 } else { 30_000 };
    let request = SessionExecRequest {
        timeout_ms: Some(timeout_ms),
        files: files
            .iter()
            .map(|(path, data)| ((*path).to_owned(), data.clone()))
            .collect(),
        ..SessionExecRequest::new(code)
    };
    within(
        "session exec",
        STEP_LIMIT * 3,
        daemon.client().session_exec(id, &request),
    )
    .await
    .unwrap_or_else(|e| panic!("session exec failed: {e}\n{}", daemon.log()))
}

async fn file_of(daemon: &Daemon, id: &str, path: &str) -> String {
    let bytes = within("file", STEP_LIMIT, daemon.client().session_file(id, path))
        .await
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn a_session_keeps_its_files_through_rollback_and_fork() {
    let daemon = Daemon::start_with_python(&["javascript=1", "python=1"], &[]).await;
    let client = daemon.client();
    let programs = [
        (
            Language::Python,
            "n = int(open('count.txt').read()) + 1\nopen('count.txt', 'w').write(str(n))\nn",
            "open('count.txt', 'w').write('999')\nwhile True: pass",
        ),
        (
            Language::Javascript,
            "(() => { const n = Number(files.read('count.txt')) + 1; \
             files.write('count.txt', String(n)); return n; })()",
            "files.write('count.txt', '999'); while (true) {}",
        ),
    ];
    for (language, increment, spin) in programs {
        let create = CreateSessionRequest::new(language);
        let session: SessionInfo = client.create_session(&create).await.unwrap();
        let id = session.id.as_str();
        let first = session_exec(&daemon, id, increment, &[("count.txt", text("1"))]).await;
        assert_eq!(first.result, json!(2), "{language}: {first:?}");
        assert_eq!(first.files["count.txt"], text("2"));
        let second = session_exec(&daemon, id, increment, &[]).await;
        assert_eq!(
            second.result,
            json!(3),
            "{language}: the file stayed: {second:?}"
        );

        let spun = session_exec(&daemon, id, spin, &[]).await;
        assert_eq!(spun.status, ExecStatus::Timeout, "{language}: {spun:?}");
        assert!(spun.session.unwrap().rolled_back);
        assert_eq!(file_of(&daemon, id, "count.txt").await, "3", "{language}");

        let fork = client.fork_session(id).await.unwrap();
        let forked = session_exec(&daemon, &fork.id, increment, &[("new.txt", text("x"))]).await;
        assert_eq!(forked.result, json!(4), "{language}: {forked:?}");
        assert_eq!(file_of(&daemon, id, "count.txt").await, "3", "{language}");
        let listed = client.session_files(&fork.id).await.unwrap();
        let paths: Vec<&str> = listed.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["count.txt", "new.txt"], "{language}");
        match client.session_file(id, "new.txt").await {
            Err(Error::Rejected { error, .. }) => assert_eq!(error.kind, ErrorKind::NotFound),
            other => panic!("{language}: the origin has no new.txt: {other:?}"),
        }
        changed_between_execs(&daemon, id, language, increment).await;
    }
}

/// Files changed between a session's execs: the next program sees them as changed, and the
/// interpreter's state as the last exec left it; a change refused changes nothing.
async fn changed_between_execs(daemon: &Daemon, id: &str, language: Language, increment: &str) {
    let client = daemon.client();
    let keep = match language {
        Language::Python => "kept = 41",
        _ => "const kept = 41",
    };
    session_exec(daemon, id, keep, &[]).await;
    let changes = vec![
        FileChange::Write {
            path: "in/n.txt".into(),
            data: text("10"),
        },
        FileChange::Move {
            from: "in/n.txt".into(),
            to: "count.txt".into(),
        },
        FileChange::Write {
            path: "in/gone.txt".into(),
            data: text(""),
        },
        FileChange::Remove { path: "in".into() },
    ];
    let changed = within(
        "change",
        STEP_LIMIT * 3,
        client.change_session_files(id, changes),
    )
    .await
    .unwrap_or_else(|e| panic!("{language}: changing files failed: {e}\n{}", daemon.log()));
    let listed = client.session_files(id).await.unwrap();
    let paths: Vec<&str> = listed.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["count.txt"], "{language}");
    let after = session_exec(daemon, id, increment, &[]).await;
    assert_eq!(after.result, json!(11), "{language}: {after:?}");
    assert!(after.session.unwrap().checkpoint > changed.checkpoint);
    let kept = session_exec(daemon, id, "kept + 1", &[]).await;
    assert_eq!(
        kept.result,
        json!(42),
        "{language}: the state stayed: {kept:?}"
    );
    let refused = vec![
        FileChange::Write {
            path: "count.txt".into(),
            data: text("0"),
        },
        FileChange::Remove {
            path: "nope".into(),
        },
    ];
    match within(
        "change",
        STEP_LIMIT,
        client.change_session_files(id, refused),
    )
    .await
    {
        Err(Error::Rejected { error, .. }) => assert_eq!(error.kind, ErrorKind::NotFound),
        other => panic!("{language}: removing nothing is refused: {other:?}"),
    }
    assert_eq!(file_of(daemon, id, "count.txt").await, "11", "{language}");
    let renamed = daemon
        .hlctl(&["session", "files", id, "--mv", "count.txt=n.txt"], "")
        .await;
    assert!(renamed.status.success(), "{renamed:?}");
    assert!(String::from_utf8_lossy(&renamed.stdout).starts_with("checkpoint "));
    assert_eq!(file_of(daemon, id, "n.txt").await, "11", "{language}");
}
