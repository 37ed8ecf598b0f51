//! End-to-end tests of the Python guest on a KVM that runs Hyperlight guests: the real daemon
//! with a `python` pool (the component `cargo xtask python-guest` builds), driven through the
//! client. `cargo xtask test` runs them in the nested-KVM VM where the host's KVM cannot run
//! guests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hyperlightd_client::{ErrorKind, ExecRequest, ExecStatus, Language};
use hyperlightd_e2e::{
    Daemon, STEP_LIMIT, assert_capped_and_finished, py, py_with_timeout, python_guest, run, within,
};
use serde_json::json;

#[path = "python/files.rs"]
mod files;
#[path = "python/packages.rs"]
mod packages;
#[path = "python/policy.rs"]
mod policy;
#[path = "python/snapshots.rs"]
mod snapshots;
#[path = "python/stream.rs"]
mod stream;

async fn python_daemon(extra: &[&str]) -> Daemon {
    Daemon::start_with_python(&["python=1"], extra).await
}

#[tokio::test]
async fn hello_world_and_the_last_expression_as_result() {
    let daemon = python_daemon(&[]).await;
    let hello = run(&daemon, py("print('hello, world')")).await;
    assert_eq!(hello.status, ExecStatus::Ok, "{hello:?}");
    assert_eq!(hello.stdout, "hello, world\n");
    assert_eq!(hello.stderr, "");
    assert_eq!(hello.result, serde_json::Value::Null);

    let value = run(
        &daemon,
        py("import sys\nsys.stderr.write('note\\n')\nxs = [x * x for x in range(4)]\n{'xs': xs, 'sum': sum(xs)}"),
    )
    .await;
    assert_eq!(value.status, ExecStatus::Ok, "{value:?}");
    assert_eq!(value.result, json!({ "xs": [0, 1, 4, 9], "sum": 14 }));
    assert_eq!(value.stderr, "note\n");

    // Values JSON cannot carry come back as their repr.
    let set = run(&daemon, py("{3, 1, 2}")).await;
    assert_eq!(set.result, json!("{1, 2, 3}"), "{set:?}");
    let version = run(&daemon, py("import sys\nsys.version_info[:2] >= (3, 12)")).await;
    assert_eq!(version.result, json!(true), "{version:?}");

    // The last statement is the result however the program is laid out (the runner compiles
    // the usual layout straight from the source, anything else through the syntax tree).
    for (program, expected) in [
        ("x = (1,\n     2)\nsum(\n    x)", json!(3)),
        ("for i in range(3):\n    pass", serde_json::Value::Null),
        ("print('a'); 5", json!(5)),
        ("s = '''\nx\n'''\ns", json!("\nx\n")),
        ("x = 5\n# done\n", serde_json::Value::Null),
        ("'only'", json!("only")),
        ("x = 1\nx, 2", json!([1, 2])),
        // The last line at column 0 does not start the last statement: it goes on one begun
        // earlier (a call's arguments, a backslash, a string).
        (
            "f = lambda *a, **k: len(a) + 10 * len(k)\nf(\nx=1)",
            json!(10),
        ),
        ("x = \\\n5", serde_json::Value::Null),
        ("s = '''\nx'''", serde_json::Value::Null),
        // Nothing of the runner's is left in the program's globals but the tools module.
        (
            "x = 1\nsorted(globals())",
            json!(["__builtins__", "__name__", "tools", "x"]),
        ),
    ] {
        let response = run(&daemon, py(program)).await;
        assert_eq!(response.status, ExecStatus::Ok, "{program:?}: {response:?}");
        assert_eq!(response.result, expected, "{program:?}: {response:?}");
    }

    // Output is line-buffered in the guest; what is left without a newline arrives at the end.
    let unfinished = run(
        &daemon,
        py("import sys\nprint('a', end='')\nprint('b', end='', flush=True)\nsys.stdout.write('c')\nsys.stderr.write('d')"),
    )
    .await;
    assert_eq!(unfinished.stdout, "abc", "{unfinished:?}");
    assert_eq!(unfinished.stderr, "d", "{unfinished:?}");
}

#[tokio::test]
async fn exception_gives_type_message_and_traceback() {
    let daemon = python_daemon(&[]).await;
    let response = run(
        &daemon,
        py("def check(x):\n    raise ValueError(f'bad value {x}')\n\ncheck(42)"),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Error, "{response:?}");
    let error = response.error.expect("an error");
    assert_eq!(error.kind, ErrorKind::Exception);
    assert_eq!(error.message, "ValueError: bad value 42");
    assert!(
        response
            .stderr
            .starts_with("Traceback (most recent call last):"),
        "{}",
        response.stderr
    );
    assert!(
        response.stderr.contains("line 2, in check"),
        "{}",
        response.stderr
    );
    assert!(
        !response.stderr.contains("runner.py") && !response.stderr.contains("hyperlightd_program"),
        "the runner's own frames are left out: {}",
        response.stderr
    );
    // An exception in the last expression is reported at its own line.
    let last_line = run(&daemon, py("x = 1\n\n[x,\n 1 / 0]")).await;
    assert_eq!(last_line.status, ExecStatus::Error, "{last_line:?}");
    assert!(last_line.stderr.contains("line 4"), "{}", last_line.stderr);
    assert!(
        last_line.stderr.contains("ZeroDivisionError"),
        "{}",
        last_line.stderr
    );

    let syntax = run(&daemon, py("def f(:\n  pass")).await;
    assert_eq!(syntax.status, ExecStatus::Error, "{syntax:?}");
    assert_eq!(syntax.error.unwrap().kind, ErrorKind::SyntaxError);
}

#[tokio::test]
async fn files_network_and_processes_are_python_exceptions() {
    let daemon = python_daemon(&[]).await;
    for (code, exception) in [
        ("open('/etc/passwd').read()", "FileNotFoundError"),
        ("open('/tmp/x', 'w').write('x')", "FileNotFoundError"),
        // The library the guest imports from can be read, never changed.
        (
            "open('/python/os.py', 'a').write('x')",
            "OSError: [Errno 69] Read-only",
        ),
        (
            "import os\nos.remove('/python/os.py')",
            "OSError: [Errno 69] Read-only",
        ),
        (
            "import os\nos.mkdir('/0/new')",
            "OSError: [Errno 69] Read-only",
        ),
        (
            "import socket\nsocket.create_connection(('127.0.0.1', 80))",
            "PermissionError",
        ),
        ("import subprocess\nsubprocess.run(['ls'])", "OSError"),
        (
            "import bz2\nbz2.compress(b'x')",
            "_bz2.Bzip2Unavailable: bzip2 is not available in this guest",
        ),
        (
            "import threading\nthreading.Thread(target=print).start()",
            "RuntimeError: can't start new thread",
        ),
    ] {
        let response = run(&daemon, py(code)).await;
        assert_eq!(response.status, ExecStatus::Error, "{code}: {response:?}");
        let error = response.error.unwrap();
        assert_eq!(error.kind, ErrorKind::Exception, "{code}: {error:?}");
        assert!(
            error.message.starts_with(exception),
            "{code}: {}",
            error.message
        );
    }
    // None of that hurt the sandbox.
    let after = run(&daemon, py("'still fine'")).await;
    assert_eq!(after.result, json!("still fine"), "{after:?}");
}

#[tokio::test]
async fn state_does_not_leak_between_requests() {
    let daemon = python_daemon(&[]).await;
    let program = "import builtins, json\nseen = (getattr(builtins, 'planted', None), globals().get('planted'), getattr(json, 'planted', None))\nbuiltins.planted = 1\nplanted = 1\njson.planted = 1\nseen";
    for _ in 0..2 {
        let response = run(&daemon, py(program)).await;
        assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
        assert_eq!(response.result, json!([null, null, null]), "{response:?}");
    }
    // The template's objects are out of the collector's reach (gc.freeze), so that a collection
    // a request sets off does not copy every page of the template; a collection leaves them so.
    let frozen = "import gc\nbefore = gc.get_freeze_count()\ngc.collect()\n[before > 1000, gc.get_freeze_count() == before]";
    let response = run(&daemon, py(frozen)).await;
    assert_eq!(response.result, json!([true, true]), "{response:?}");
    // Every request gets its own random sequence, not the one frozen at build time.
    let draw = "import random\n[random.random() for _ in range(3)]";
    let first = run(&daemon, py(draw)).await;
    let second = run(&daemon, py(draw)).await;
    assert_ne!(first.result, second.result, "{first:?} {second:?}");
}

#[tokio::test]
async fn infinite_loop_times_out_and_the_next_request_succeeds() {
    let daemon = python_daemon(&["--python-max-host-handles", "2000"]).await;
    let lines: Vec<String> = (0..150).map(|i| format!("line {i}\n")).collect();
    let response = run(
        &daemon,
        py_with_timeout(
            "import builtins\nbuiltins.planted = 1\nfor i in range(150):\n    print('line', i)\nwhile True:\n    pass",
            5000,
        ),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Timeout, "{response:?}");
    // The first 100 lines went to the host line by line, so the loop did not lose them; the
    // rest went into a block that was still pending.
    assert!(
        response.stdout.starts_with(&lines[..100].concat())
            && lines.concat().starts_with(&response.stdout),
        "{response:?}"
    );
    assert_eq!(response.error.unwrap().kind, ErrorKind::Timeout);

    // A sleep is bounded by the time limit too, and what was printed before it is sent first.
    let sleeper = run(
        &daemon,
        py_with_timeout(
            "import time\nfor i in range(150):\n    print('line', i)\ntime.sleep(30)",
            5000,
        ),
    )
    .await;
    assert_eq!(sleeper.status, ExecStatus::Timeout, "{sleeper:?}");
    assert_eq!(sleeper.stdout, lines.concat(), "{sleeper:?}");

    // A loop of sleeps takes a host handle each time, and is stopped at the limit.
    let sleeps = run(
        &daemon,
        py_with_timeout("import time\nwhile True:\n    time.sleep(0)", 30_000),
    )
    .await;
    assert_eq!(sleeps.status, ExecStatus::Error, "{sleeps:?}");
    let error = sleeps.error.unwrap();
    assert_eq!(error.kind, ErrorKind::ResourceLimit, "{}", error.message);
    assert!(
        error.message.contains("2000 host handles"),
        "{}",
        error.message
    );

    // The sandbox was restored after each, not rebuilt: the next request is served at once,
    // and nothing of the earlier programs is left.
    let after = run(
        &daemon,
        py("import builtins\n(getattr(builtins, 'planted', None), 6 * 7)"),
    )
    .await;
    assert_eq!(after.result, json!([null, 42]), "{after:?}");
    assert_eq!(sandboxes_built(&daemon).await, 1.0);
}

#[tokio::test]
async fn sleep_lasts_as_long_as_asked_and_every_clock_measures_it() {
    let daemon = python_daemon(&[]).await;
    let clocks =
        "(time.time(), time.monotonic(), time.perf_counter(), time.perf_counter_ns() / 1e9)";
    let response = run(
        &daemon,
        py(&format!("import time\nstart = {clocks}\ntime.sleep(0.5)\nend = {clocks}\n[b - a for a, b in zip(start, end)]")),
    )
    .await;
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    let measured: Vec<f64> = serde_json::from_value(response.result.clone()).unwrap();
    assert_eq!(measured.len(), 4, "{response:?}");
    for (clock, slept) in ["time", "monotonic", "perf_counter", "perf_counter_ns"]
        .iter()
        .zip(measured)
    {
        assert!((0.45..5.0).contains(&slept), "{clock}: slept {slept} s");
    }
    // A busy loop advances the monotonic clocks too (not only whole seconds).
    let busy = run(
        &daemon,
        py("import time\nstart = time.perf_counter()\nsum(range(200000))\ntime.perf_counter() - start"),
    )
    .await;
    let took = busy.result.as_f64().unwrap();
    // (With the defect, the difference was 0 or one nanosecond.)
    assert!(took > 1e-6 && took < 30.0, "{busy:?}");
}

#[tokio::test]
async fn a_poisoned_sandbox_is_restored_in_place_and_leaks_nothing() {
    let daemon = python_daemon(&[]).await;
    let plant = "import builtins, json\nbuiltins.planted = 1\njson.planted = 1\n";
    let check = py(
        "import builtins, json\n[getattr(builtins, 'planted', None), getattr(json, 'planted', None)]",
    );
    // A memory bomb, an allocation larger than the guest, allocations that grow until one does
    // not fit and unbounded recursion exhaust the guest's memory (it aborts); os._exit() ends
    // the program from inside. Each leaves the sandbox poisoned.
    for (hostile, status, kind) in [
        (
            "hoard = []\nwhile True:\n    hoard.append(' ' * 10**6)",
            ExecStatus::Error,
            Some(ErrorKind::OutOfMemory),
        ),
        (
            "len(bytearray(2**31 - 1))",
            ExecStatus::Error,
            Some(ErrorKind::OutOfMemory),
        ),
        (
            "xs = []\nn = 1 << 16\nwhile True:\n    xs.append(bytearray(n))\n    n *= 2",
            ExecStatus::Error,
            Some(ErrorKind::OutOfMemory),
        ),
        (
            "import sys\nsys.setrecursionlimit(10**7)\ndef down(n):\n    return down(n + 1) + 1\ndown(0)",
            ExecStatus::Error,
            Some(ErrorKind::OutOfMemory),
        ),
        (
            "import os\nprint('bye')\nos._exit(3)",
            ExecStatus::Error,
            Some(ErrorKind::Exception),
        ),
        ("import os\nos._exit(0)", ExecStatus::Ok, None),
    ] {
        let response = run(
            &daemon,
            py_with_timeout(&format!("{plant}{hostile}"), 30_000),
        )
        .await;
        assert_eq!(response.status, status, "{hostile}: {response:?}");
        assert_eq!(
            response.error.as_ref().map(|e| e.kind),
            kind,
            "{hostile}: {response:?}"
        );
        let after = run(&daemon, check.clone()).await;
        assert_eq!(
            after.result,
            json!([null, null]),
            "after {hostile}: {after:?}"
        );
    }
    assert_eq!(sandboxes_built(&daemon).await, 1.0, "nothing rebuilt");
}

/// A restore zeroes in place only the pages the next run takes again, at most 16 MiB of them,
/// and gives back the rest (patches/hyperlight-host): the pages a large program wrote are gone
/// from the daemon once a small program has run after it.
#[tokio::test]
async fn memory_a_large_program_wrote_is_given_back() {
    let daemon = python_daemon(&[]).await;
    let small = py("x = 1\nx");
    // With one sandbox, each answer comes after the restore that followed the request before.
    for _ in 0..2 {
        assert_eq!(run(&daemon, small.clone()).await.result, json!(1));
    }
    let before = daemon.resident_bytes();
    let large = run(
        &daemon,
        py_with_timeout(
            "block = bytearray(48 * 2**20)\nfor i in range(0, len(block), 4096):\n    block[i] = 1\nlen(block)",
            60_000,
        ),
    )
    .await;
    assert_eq!(large.result, json!(48 << 20), "{large:?}");
    for _ in 0..2 {
        assert_eq!(run(&daemon, small.clone()).await.result, json!(1));
    }
    let after = daemon.resident_bytes();
    // The large program's 48 MiB, or the 16 MiB a restore may keep, would show; the daemon's
    // own allocations move by far less.
    assert!(
        after < before + (8 << 20),
        "resident {before} bytes before the large program, {after} after"
    );
}

#[tokio::test]
async fn output_is_capped_however_it_is_written() {
    let daemon = python_daemon(&[]).await;
    let cap = 100_000;
    for (program, to_stderr) in [
        ("import sys\nsys.stdout.write('z' * 3_000_000)", false),
        ("import sys\nsys.stderr.write('e' * 3_000_000)", true),
        // Many small writes: the cap is reached after a few thousand, and the rest are dropped
        // in the guest (which still takes seconds under emulation).
        (
            "for _ in range(20_000):\n    print('x' * 40, end='')",
            false,
        ),
        ("for i in range(20_000):\n    print('line', i)", false),
        (
            "import sys\nprint('q' * 3_000_000, file=sys.__stdout__)",
            false,
        ),
        ("import sys\nsys.__stderr__.write('r' * 3_000_000)", true),
        // os.write may write less than asked (it says how much), as POSIX allows.
        (
            "import os\ndata = b'w' * 3_000_000\nwhile data:\n    data = data[os.write(1, data):]",
            false,
        ),
        (
            "import os\ndata = b'v' * 3_000_000\nwhile data:\n    data = data[os.write(2, data):]",
            true,
        ),
    ] {
        let mut request = py_with_timeout(&format!("{program}\n'after'"), 60_000);
        request.max_output_bytes = Some(cap);
        let response = run(&daemon, request).await;
        assert_capped_and_finished(&response, program, to_stderr, cap);
    }
    let huge_error = run(&daemon, py("raise ValueError('v' * 3_000_000)")).await;
    assert_eq!(huge_error.status, ExecStatus::Error, "{huge_error:?}");
    let error = huge_error.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Exception);
    assert!(
        error.message.starts_with("ValueError: vvv"),
        "{}",
        &error.message[..40]
    );
    assert!(error.message.len() < 9_000, "{}", error.message.len());
    assert_eq!(sandboxes_built(&daemon).await, 1.0, "no sandbox failed");
}

#[tokio::test]
async fn sigterm_during_startup_stops_at_once_and_removes_the_socket() {
    let guest = python_guest();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("d.sock");
    let mut daemon = tokio::process::Command::new(hyperlightd_e2e::binary("hyperlightd"))
        .arg("--socket")
        .arg(&socket)
        .args(["--pool", "python=1", "--python-guest"])
        .arg(&guest)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The socket is bound first; building the Python sandbox takes seconds after that.
    within("the socket appearing", STEP_LIMIT, async {
        while !socket.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(daemon.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = within(
        "the daemon stopping",
        Duration::from_secs(20),
        daemon.wait(),
    )
    .await
    .unwrap();
    let mut log = String::new();
    tokio::io::AsyncReadExt::read_to_string(daemon.stderr.as_mut().unwrap(), &mut log)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("SIGTERM during startup"), "{log}");
    assert!(!socket.exists(), "the socket is removed");
}

#[tokio::test]
async fn a_python_guest_that_cannot_be_loaded_is_blamed_not_the_hypervisor() {
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("python.aot");
    std::fs::write(&corrupt, vec![0x5a; 64 * 1024]).unwrap();
    let out = within("a daemon with a corrupt guest", STEP_LIMIT, async {
        tokio::process::Command::new(hyperlightd_e2e::binary("hyperlightd"))
            .arg("--socket")
            .arg(dir.path().join("d.sock"))
            .args(["--pool", "python=1", "--python-guest"])
            .arg(&corrupt)
            .arg("--python-lib")
            .arg(python_guest().with_file_name("python-lib.tar"))
            .output()
            .await
            .unwrap()
    })
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("starting the python pool"), "{stderr}");
    assert!(stderr.contains("loading the Python guest"), "{stderr}");
    assert!(!stderr.contains("cannot run Hyperlight guests"), "{stderr}");
    assert!(!dir.path().join("d.sock").exists());
}

/// How many Python sandboxes the daemon has built so far.
async fn sandboxes_built(daemon: &Daemon) -> f64 {
    let metrics = within("metrics", STEP_LIMIT, daemon.client().metrics())
        .await
        .unwrap();
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix(r#"hyperlightd_sandbox_create_seconds_count{language="python"}"#)?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no Python sandbox count in:\n{metrics}"))
}

#[tokio::test]
async fn javascript_and_python_requests_mixed_concurrently() {
    let daemon = Daemon::start_with_python(&["python=1", "javascript=1"], &[]).await;
    let client = daemon.client();
    let mut tasks = Vec::new();
    for n in 0..8u64 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let request = if n % 2 == 0 {
                py(&format!("print('py {n}')\n{n} * {n}"))
            } else {
                ExecRequest::new(
                    Language::Javascript,
                    format!("console.log('js {n}'); {n} * {n}"),
                )
            };
            (n, client.exec(&request).await)
        }));
    }
    for task in tasks {
        let (n, response) = within("mixed request", Duration::from_secs(180), task)
            .await
            .unwrap();
        let response = response.unwrap_or_else(|e| panic!("request {n}: {e}"));
        assert_eq!(response.status, ExecStatus::Ok, "request {n}: {response:?}");
        assert_eq!(response.result, json!(n * n), "request {n}");
        let lang = if n % 2 == 0 { "py" } else { "js" };
        assert_eq!(response.stdout, format!("{lang} {n}\n"), "request {n}");
    }
}
