//! End-to-end tests of the native Python guest (issue 27) on a KVM that runs Hyperlight guests:
//! the real daemon with `--python-runtime native` and the rootfs `cargo xtask native-python`
//! builds (Debian's CPython 3.11 with the scientific stack), driven through the client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hyperlightd_client::{
    CreateSessionRequest, ErrorKind, ExecRequest, ExecStatus, FileChange, FileData, Language,
    Policy, SessionExecRequest,
};
use hyperlightd_e2e::{
    Daemon, E2bGateway, STEP_LIMIT, new_session, py, python_sdk_python, run, within,
};
use serde_json::{Value, json};

#[path = "native_python/packages.rs"]
mod packages;

/// A daemon serving Python natively. A request that names no time limit gets 30 s: drawing a figure
/// or fitting a model in a debug daemon under emulation takes seconds, and more while the
/// machine is busy.
async fn native_daemon(extra: &[&str]) -> Daemon {
    let mut args = vec!["--default-timeout-ms", "30000"];
    args.extend_from_slice(extra);
    Daemon::start_with_native_python(&["python=1"], &args).await
}

#[tokio::test]
async fn the_result_convention_output_and_errors_are_the_webassembly_guest_s() {
    let daemon = native_daemon(&[]).await;
    let hello = run(
        &daemon,
        py("print('hello')\nimport sys\nsys.stderr.write('note\\n')\n6 * 7"),
    )
    .await;
    assert_eq!(hello.status, ExecStatus::Ok, "{hello:?}");
    assert_eq!(
        (hello.stdout.as_str(), hello.stderr.as_str()),
        ("hello\n", "note\n")
    );
    assert_eq!(hello.result, json!(42));

    // The template's objects (the packages') are out of the collector's reach (gc.freeze), so
    // that a collection a request sets off does not copy every page of the template.
    let frozen = run(&daemon, py("import gc\ngc.get_freeze_count() > 10000")).await;
    assert_eq!(frozen.result, json!(true), "{frozen:?}");

    let version = run(&daemon, py("import sys, numpy, pandas\n[sys.version_info[:2], numpy.__version__, pandas.__version__]")).await;
    assert_eq!(version.status, ExecStatus::Ok, "{version:?}");
    assert_eq!(version.result[0], json!([3, 11]), "{version:?}");

    // numpy's scalars and arrays are the numbers and lists they hold; a NaN in one is not JSON,
    // and the result is its repr.
    let numbers = run(
        &daemon,
        py("import numpy as np
[np.int64(6), np.float32(0.5), np.arange(3) * 2]"),
    )
    .await;
    assert_eq!(numbers.result, json!([6, 0.5, [0, 2, 4]]), "{numbers:?}");
    let nan = run(
        &daemon,
        py("import numpy as np
np.array([np.nan])"),
    )
    .await;
    assert_eq!(nan.result, json!("array([nan])"), "{nan:?}");

    // Health says which runtime serves Python, its version, and the packages with the
    // versions the guest imports.
    let health = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    let runtime = &health.runtimes[&Language::Python];
    assert_eq!(runtime.name, "native");
    let packages = &health.packages[&Language::Python];
    assert_eq!(
        json!([
            runtime
                .version
                .as_deref()
                .unwrap_or_default()
                .starts_with("3.11."),
            packages["numpy"],
            packages["pandas"]
        ]),
        json!([true, version.result[1], version.result[2]]),
        "{health:?}"
    );

    let raised = run(
        &daemon,
        py("def f():\n    raise ValueError('bad value')\nf()"),
    )
    .await;
    assert_eq!(raised.status, ExecStatus::Error, "{raised:?}");
    let error = raised.error.expect("an error");
    assert_eq!(error.kind, ErrorKind::Exception);
    assert_eq!(error.message, "ValueError: bad value");
    assert!(raised.stderr.contains("line 2, in f"), "{}", raised.stderr);
    assert!(
        !raised.stderr.contains("hyperlightd_"),
        "the runner's own frames are left out: {}",
        raised.stderr
    );

    let syntax = run(&daemon, py("def (")).await;
    assert_eq!(syntax.error.expect("an error").kind, ErrorKind::SyntaxError);

    // Nothing of one request is left for the next.
    run(&daemon, py("leaked = 1")).await;
    let fresh = run(&daemon, py("'leaked' in globals()")).await;
    assert_eq!(fresh.result, json!(false), "{fresh:?}");
}

const GROUP_SALES: &str = r#"
import os
import pandas as pd
frame = pd.read_csv('sales.csv')
totals = frame.groupby('city', as_index=False)['sales'].sum().sort_values('city')
os.makedirs('out', exist_ok=True)
totals.to_csv('out/totals.csv', index=False)
int(totals['sales'].sum())
"#;

#[tokio::test]
async fn pandas_reads_a_csv_given_groups_it_and_writes_a_csv_that_comes_back() {
    let daemon = native_daemon(&[]).await;
    let csv = "city,sales\nOslo,10\nLima,5\nOslo,7\nLima,1\nKyiv,3\n";
    let request = ExecRequest {
        files: [("sales.csv".to_owned(), FileData::Text(csv.to_owned()))]
            .into_iter()
            .collect(),
        ..py(GROUP_SALES)
    };
    let answer = run(&daemon, request).await;
    assert_eq!(answer.status, ExecStatus::Ok, "{answer:?}");
    assert_eq!(answer.result, json!(26));
    assert_eq!(
        answer.files.get("out/totals.csv"),
        Some(&FileData::Text(
            "city,sales\nKyiv,3\nLima,6\nOslo,17\n".to_owned()
        )),
        "{:?}",
        answer.files
    );
    assert!(
        !answer.files.contains_key("sales.csv"),
        "only what changed comes back"
    );

    // The working directory's caps (8 MiB by default) hold when the files are sent back.
    let big = run(&daemon, py("open('big.bin', 'wb').write(b'x' * 9_000_000)")).await;
    assert_eq!(big.status, ExecStatus::Ok, "{big:?}");
    assert!(
        big.stderr.contains("hyperlightd: a write was refused"),
        "{}",
        big.stderr
    );
    let kept = big
        .files
        .get("big.bin")
        .map_or(0, |f| f.to_bytes().unwrap().len());
    assert!(kept <= 8 << 20, "{kept} bytes came back");
}

#[tokio::test]
async fn scikit_learn_fits_and_predicts_and_scipy_optimises() {
    let daemon = native_daemon(&[]).await;
    let fit = run(
        &daemon,
        py(
            "import numpy as np\nfrom sklearn.linear_model import LinearRegression\n\
            x = np.arange(10).reshape(-1, 1)\ny = 3 * x.ravel() + 2\n\
            model = LinearRegression().fit(x, y)\nround(float(model.predict([[20]])[0]), 6)",
        ),
    )
    .await;
    assert_eq!(fit.result, json!(62.0), "{fit:?}");
    let optimum = run(
        &daemon,
        py("from scipy.optimize import minimize\n\
            best = minimize(lambda v: (v[0] - 3) ** 2 + (v[1] + 1) ** 2, [0, 0])\n\
            [round(float(x), 3) for x in best.x]"),
    )
    .await;
    assert_eq!(optimum.result, json!([3.0, -1.0]), "{optimum:?}");
}

/// Each source of randomness a program may use draws other numbers in two requests.
async fn draws_differ(daemon: &Daemon) {
    let draw = "import random, os, secrets, uuid\nimport numpy as np\n\
                [int(np.random.default_rng().integers(0, 2**62)), float(np.random.rand()), \
                random.random(), os.urandom(8).hex(), secrets.token_hex(8), str(uuid.uuid4())]";
    let first = run(daemon, py(draw)).await;
    let second = run(daemon, py(draw)).await;
    assert_eq!(first.status, ExecStatus::Ok, "{first:?}");
    for i in 0..6 {
        assert_ne!(
            first.result[i], second.result[i],
            "draw {i}: {first:?} {second:?}"
        );
    }
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_in_time_and_the_next_request_succeeds() {
    let daemon = native_daemon(&[]).await;
    // A new sandbox is primed before its first request, which waits for it (seconds under
    // emulation, all of a short time limit): the limits below are for the programs.
    assert_eq!(run(&daemon, py("0")).await.result, json!(0));
    let request = ExecRequest {
        timeout_ms: Some(2000),
        ..py("print('spinning', flush=True)\nwhile True:\n    pass")
    };
    let stopped = run(&daemon, request).await;
    assert_eq!(stopped.status, ExecStatus::Timeout, "{stopped:?}");
    assert_eq!(stopped.error.expect("an error").kind, ErrorKind::Timeout);
    assert_eq!(stopped.stdout, "spinning\n");
    let asleep = ExecRequest {
        timeout_ms: Some(1000),
        ..py("import time\ntime.sleep(30)")
    };
    let stopped = run(&daemon, asleep).await;
    assert_eq!(stopped.error.expect("an error").kind, ErrorKind::Timeout);
    let next = run(&daemon, py("1 + 1")).await;
    assert_eq!(next.result, json!(2), "{next:?}");
}

#[tokio::test]
async fn processes_and_sockets_fail_cleanly_and_a_policy_refuses_them() {
    let daemon = native_daemon(&[]).await;
    let answer = run(
        &daemon,
        py("import subprocess, os, socket\nout = {}\n\
            try:\n    subprocess.run(['/usr/bin/python3', '-c', 'print(1)'])\n    out['subprocess'] = 'ran'\n\
            except OSError as e:\n    out['subprocess'] = type(e).__name__\n\
            out['system'] = os.system('echo hi')\n\
            try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    out['socket'] = 'connected'\n\
            except OSError as e:\n    out['socket'] = type(e).__name__\n\
            out"),
    )
    .await;
    assert_eq!(answer.status, ExecStatus::Ok, "{answer:?}");
    assert_ne!(answer.result["subprocess"], json!("ran"), "{answer:?}");
    assert_ne!(answer.result["system"], json!(0), "{answer:?}");
    assert_ne!(answer.result["socket"], json!("connected"), "{answer:?}");

    // A policy refuses them before anything runs, as in the WebAssembly guest (same checker).
    let policy = Policy {
        allowed_modules: Some(vec!["numpy".into(), "pandas".into()]),
        blocked_functions: vec!["eval".into()],
        blocked_globals: Vec::new(),
    };
    let refused = run(
        &daemon,
        ExecRequest {
            policy: Some(policy.clone()),
            ..py("print('ran')\nimport numpy, subprocess\nfrom socket import socket\neval('1')")
        },
    )
    .await;
    assert_eq!(
        (refused.status, refused.stdout.as_str()),
        (ExecStatus::Error, ""),
        "{refused:?}"
    );
    let error = refused.error.expect("an error");
    assert_eq!(error.kind, ErrorKind::PolicyViolation, "{error:?}");
    let violations: Vec<(u32, &str, &str)> = error
        .violations
        .iter()
        .map(|v| (v.line, v.rule.as_str(), v.name.as_str()))
        .collect();
    assert_eq!(
        violations,
        [
            (2, "allowed_modules", "subprocess"),
            (3, "allowed_modules", "socket"),
            (4, "blocked_functions", "eval")
        ]
    );
    let allowed = run(
        &daemon,
        ExecRequest {
            policy: Some(policy),
            ..py("import numpy as np\nint(np.ones(3).sum())")
        },
    )
    .await;
    assert_eq!(allowed.result, json!(3), "{allowed:?}");
}

/// The result of a session exec that must succeed and not roll back. Its time limit leaves
/// room for loading the session's saved state after another exec was rolled back.
async fn value(daemon: &Daemon, id: &str, code: &str) -> Value {
    let request = SessionExecRequest {
        timeout_ms: Some(30_000),
        ..SessionExecRequest::new(code)
    };
    let response = within(
        "session exec",
        STEP_LIMIT,
        daemon.client().session_exec(id, &request),
    )
    .await
    .unwrap_or_else(|e| panic!("session exec of {code:?} failed: {e}\n{}", daemon.log()));
    assert_eq!(response.status, ExecStatus::Ok, "{code}: {response:?}");
    assert!(
        !response.session.as_ref().unwrap().rolled_back,
        "{response:?}"
    );
    response.result
}

#[tokio::test]
async fn a_session_keeps_a_data_frame_and_its_env_survives_a_rolled_back_timeout_and_forks() {
    let daemon = native_daemon(&[]).await;
    let client = daemon.client();
    let mut request = CreateSessionRequest::new(Language::Python);
    request.env = [("MODE".to_owned(), "session".to_owned())].into();
    let id = within("create", STEP_LIMIT, client.create_session(&request))
        .await
        .unwrap()
        .id;
    // The session's env, under an exec's own for that exec only, beside the guest's own
    // (matplotlib's backend).
    let read =
        "import os\n[os.environ.get('MODE'), os.environ.get('ONLY'), os.environ['MPLBACKEND']]";
    let own = SessionExecRequest {
        timeout_ms: Some(30_000),
        env: [
            ("MODE".to_owned(), "exec".to_owned()),
            ("ONLY".to_owned(), "1".to_owned()),
        ]
        .into(),
        ..SessionExecRequest::new(read)
    };
    let answer = within("session exec", STEP_LIMIT, client.session_exec(&id, &own))
        .await
        .unwrap();
    assert_eq!(answer.result, json!(["exec", "1", "Agg"]), "{answer:?}");
    let kept = value(&daemon, &id, read).await;
    assert_eq!(kept, json!(["session", null, "Agg"]));
    value(
        &daemon,
        &id,
        "import pandas as pd\nframe = pd.DataFrame({'n': [1, 2, 3]})",
    )
    .await;
    let doubled = value(
        &daemon,
        &id,
        "frame['twice'] = frame['n'] * 2\nint(frame['twice'].sum())",
    )
    .await;
    assert_eq!(doubled, json!(12));

    let spin = SessionExecRequest {
        timeout_ms: Some(2000),
        ..SessionExecRequest::new("frame['lost'] = 0\nwhile True:\n    pass")
    };
    let stopped = within("session exec", STEP_LIMIT, client.session_exec(&id, &spin))
        .await
        .unwrap();
    assert_eq!(stopped.status, ExecStatus::Timeout, "{stopped:?}");
    assert!(stopped.session.unwrap().rolled_back);
    let columns = "list(frame.columns)";
    assert_eq!(value(&daemon, &id, columns).await, json!(["n", "twice"]));

    // The two halves of a fork share the frame, then diverge, and draw their own numbers.
    let fork = within("fork", STEP_LIMIT, client.fork_session(&id))
        .await
        .unwrap()
        .id;
    value(&daemon, &id, "frame['origin'] = 1").await;
    assert_eq!(value(&daemon, &fork, columns).await, json!(["n", "twice"]));
    let draw = "import numpy as np, random\n\
                [int(np.random.default_rng().integers(0, 2**62)), float(np.random.rand()), random.random()]";
    let (a, b) = (
        value(&daemon, &id, draw).await,
        value(&daemon, &fork, draw).await,
    );
    for i in 0..3 {
        assert_ne!(
            a[i], b[i],
            "draw {i}: the halves of a fork share a random sequence"
        );
    }

    // A CSV written between execs is read by the next, beside the frame the session kept.
    let changes = vec![FileChange::Write {
        path: "in/more.csv".into(),
        data: FileData::Text("n\n10\n20\n".into()),
    }];
    within(
        "change",
        STEP_LIMIT,
        client.change_session_files(&id, changes),
    )
    .await
    .unwrap_or_else(|e| panic!("changing files failed: {e}\n{}", daemon.log()));
    let read = "int(pd.concat([frame, pd.read_csv('in/more.csv')])['n'].sum())";
    assert_eq!(value(&daemon, &id, read).await, json!(36));
}

/// The guest's kernel grants any mapping and backs it page by page; the driver refuses at once
/// an allocation that cannot fit in the guest (guest/python-native/hl_memory.c), as Linux does:
/// the program gets a MemoryError it can catch, and the sandbox serves the next request.
#[tokio::test]
async fn an_allocation_larger_than_the_guest_fails_at_once_and_the_next_request_succeeds() {
    let daemon = native_daemon(&[]).await;
    // 3.2 GB in a 1 GiB guest: before the driver refused it, it was filled until the time limit.
    let oversized = run(
        &daemon,
        py("import numpy as np\nnp.ones(400_000_000).sum()"),
    )
    .await;
    assert_eq!(oversized.status, ExecStatus::Error, "{oversized:?}");
    let error = oversized.error.as_ref().expect("an error");
    assert_eq!(
        (error.kind, error.message.as_str()),
        (
            ErrorKind::OutOfMemory,
            "the program ran out of memory (MemoryError)"
        ),
        "{oversized:?}"
    );
    // Caught by the program, which goes on: numpy's own message, and Python's for a bytearray.
    let caught = run(
        &daemon,
        py("import numpy as np\nout = []\n\
            try:\n    np.ones(400_000_000)\nexcept MemoryError as e:\n    out.append(str(e))\n\
            try:\n    bytearray(3 * 10**9)\nexcept MemoryError as e:\n    out.append(type(e).__name__)\n\
            out"),
    )
    .await;
    assert_eq!(caught.status, ExecStatus::Ok, "{caught:?}");
    assert!(
        caught.result[0]
            .as_str()
            .is_some_and(|m| m.starts_with("Unable to allocate 2.98 GiB")),
        "{caught:?}"
    );
    assert_eq!(caught.result[1], json!("MemoryError"), "{caught:?}");
    // Allocations that grow until one does not fit.
    let growing = run(
        &daemon,
        py("import numpy as np\nxs = []\nn = 1 << 20\nwhile True:\n    xs.append(np.empty(n))\n    n *= 2"),
    )
    .await;
    assert_eq!(
        growing.error.as_ref().map(|e| e.kind),
        Some(ErrorKind::OutOfMemory),
        "{growing:?}"
    );
    let next = run(&daemon, py("import numpy as np\nint(np.arange(10).sum())")).await;
    assert_eq!(next.result, json!(45), "{next:?}");
}

const FIGURE_AND_FRAME: &str = "import matplotlib.pyplot as plt\nimport pandas as pd\n\
    print('before')\nplt.plot([1, 4, 9])\nplt.title('squares')\nplt.show()\nprint('after')\n\
    pd.DataFrame({'city': ['Oslo', 'Lima'], 'sales': [17, 6]})";

#[tokio::test]
async fn a_figure_comes_back_as_png_and_a_data_frame_as_html_and_text() {
    // Drawing and encoding a figure takes 13 to 25 s under emulation beside another VM (a
    // fraction of a second on hardware): both runs get the daemon's most, 60 s, not the
    // suite's default of 30 s.
    let daemon = native_daemon(&[]).await;
    let request = ExecRequest {
        timeout_ms: Some(60_000),
        ..py(FIGURE_AND_FRAME)
    };
    let answer = run(&daemon, request).await;
    assert_eq!(answer.status, ExecStatus::Ok, "{answer:?}");
    assert_eq!(
        (answer.stdout.as_str(), &answer.result),
        ("before\nafter\n", &json!(null))
    );
    assert_eq!(answer.display.len(), 2, "{:?}", answer.display);
    // plt.show() is output the program showed; the table, its last expression, is its result.
    let flags: Vec<bool> = answer.display.iter().map(|item| item.result).collect();
    assert_eq!(flags, [false, true]);
    let png = BASE64.decode(&answer.display[0].data["image/png"]).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let table = &answer.display[1].data;
    assert!(table["text/html"].contains("<table") && table["text/html"].contains("Oslo"));
    assert!(table["text/plain"].contains("Lima") && table["text/plain"].contains("17"));

    // hlctl streams the same program: the table's text as it comes, the image saved.
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().to_str().unwrap();
    let out = daemon
        .hlctl(
            &[
                "exec",
                "--lang",
                "python",
                "--output-dir",
                saved,
                "--timeout-ms",
                "60000",
                "-e",
                FIGURE_AND_FRAME,
            ],
            "",
        )
        .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.starts_with("before\nafter\n") && stdout.contains("Oslo"),
        "{stdout}"
    );
    let image = std::fs::read(dir.path().join("display-1.png")).unwrap();
    assert!(image.starts_with(b"\x89PNG"), "not a PNG");
    assert!(
        !dir.path().join("display-2.png").exists(),
        "a table is no image"
    );
    e2b_charts_and_data_frames(&daemon).await;
}

/// E2B's documented chart and DataFrame examples, run by E2B's Python SDK (unmodified, from
/// the client's test environment) through `hlctl e2b-gateway` in front of `daemon`, whose
/// Python is native with the scientific stack, as E2B's default template's is.
const E2B_CHART_AND_FRAME: &str = r#"
import base64
from e2b_code_interpreter import Sandbox

with Sandbox.create() as sandbox:
    chart = sandbox.run_code("""
import matplotlib.pyplot as plt

plt.plot([1, 2, 3, 4])
plt.ylabel('some numbers')
plt.show()
""")
    assert chart.error is None, chart.error
    first = chart.results[0]
    png = base64.b64decode(first.png)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and not first.is_main_result, first
    frame = sandbox.run_code(
        "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima'], 'sales': [17, 6]})\ndf"
    )
    main = frame.results[-1]
    assert main.is_main_result and "<table" in main.html and "Oslo" in main.text, main
    print(f"a chart of {len(png)} bytes; a frame: {main.text.splitlines()[1]}")
"#;

async fn e2b_charts_and_data_frames(daemon: &Daemon) {
    const KEY: &str = "e2b_test_key_native_0123456789";
    let gateway = E2bGateway::start(daemon, KEY).await;
    let run = tokio::process::Command::new(python_sdk_python())
        .args(["-c", E2B_CHART_AND_FRAME])
        .env("E2B_API_URL", &gateway.url)
        .env("E2B_SANDBOX_URL", &gateway.url)
        .env("E2B_API_KEY", KEY)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    // Two runs of up to a minute each under emulation, and a session's state saved after each.
    let output = within(
        "E2B's chart and DataFrame examples",
        std::time::Duration::from_secs(300),
        run,
    )
    .await
    .expect("the SDK's python starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "E2B's chart and DataFrame examples failed:\n{stdout}{}\ndaemon log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    println!("E2B's SDK: {stdout}");
}

/// With `--snapshot-dir` the template is saved once the daemon serves, with what the guest
/// reported of itself; the next start loads it instead of booting the rootfs, and its
/// sandboxes work. Sandboxes of the built template and of the loaded one draw fresh random
/// numbers on every request. A template saved with other settings is not used.
#[tokio::test]
async fn the_template_is_saved_and_the_next_start_loads_it() {
    let dir = tempfile::tempdir().unwrap();
    let snapshots = dir.path().join("snapshots");
    let state = dir.path().join("state");
    let store = ["--snapshot-dir", snapshots.to_str().unwrap()];
    let mut durable = store.to_vec();
    durable.extend(["--state-dir", state.to_str().unwrap()]);
    let daemon = native_daemon(&store).await;
    assert_eq!(daemon.templates("python", "built").await, 1);
    let built = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    draws_differ(&daemon).await;
    let saved = daemon.wait_saved(&snapshots, &["python"], SAVE_LIMIT).await;
    drop(daemon);

    let daemon = native_daemon(&durable).await;
    let id = a_durable_session_links_the_template(&daemon, &state, &saved[0]).await;
    drop(daemon);
    let daemon = native_daemon(&durable).await;
    let client = daemon.client();
    let again = within(
        "exec",
        STEP_LIMIT,
        client.session_exec(&id, &SessionExecRequest::new("x")),
    )
    .await
    .unwrap();
    assert_eq!(again.result, json!(LONG), "read back from disk: {again:?}");
    // The state read back is shared by the next checkpoint, not copied (a GiB).
    let listed = client.session_checkpoints(&id).await.unwrap();
    let newest = listed.last().unwrap();
    assert!(newest.bytes < 64 << 20, "{listed:?}");
    drop(daemon);

    let daemon = native_daemon(&store).await;
    let log = daemon.log();
    assert_eq!(daemon.templates("python", "loaded").await, 1, "{log}");
    assert_eq!(daemon.templates("python", "built").await, 0, "{log}");
    let loaded = within("health", STEP_LIMIT, daemon.client().health())
        .await
        .unwrap();
    assert_eq!(
        (&loaded.runtimes, &loaded.packages),
        (&built.runtimes, &built.packages),
        "the runtime and its packages as the guest reported them when the template was built"
    );
    let frame = run(
        &daemon,
        py("import pandas as pd\npd.DataFrame({'a': [1, 2, 3]})['a'].sum().item()"),
    )
    .await;
    assert_eq!(
        (frame.status, &frame.result),
        (ExecStatus::Ok, &json!(6)),
        "{frame:?}"
    );
    draws_differ(&daemon).await;
    drop(daemon);

    // Another guest memory size: the saved template is not this daemon's; built, not loaded.
    let mut other = store.to_vec();
    other.extend(["--python-native-memory-mib", "768"]);
    let daemon = native_daemon(&other).await;
    assert_eq!(
        daemon.templates("python", "loaded").await,
        0,
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.templates("python", "built").await, 1);
}

/// A session of two execs on `daemon` (with the state directory `state`, its template loaded
/// from the one saved in `template`): on disk each checkpoint is the pages its exec changed,
/// and hard links to its parent's and to the saved template's file, a GiB not written again.
/// Returns the session's id.
async fn a_durable_session_links_the_template(
    daemon: &Daemon,
    state: &std::path::Path,
    template: &std::path::Path,
) -> String {
    use hyperlightd_e2e::disk::{
        checkpoint_dir, inode, layout_memory_blobs, memory_blobs, own_blob, wait_durable,
    };
    let client = daemon.client();
    let id = new_session(&client, Language::Python).await;
    for code in ["x = 1", "x = 2"] {
        let request = SessionExecRequest::new(code);
        let response = within("exec", STEP_LIMIT, client.session_exec(&id, &request))
            .await
            .unwrap();
        assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    }
    wait_durable(&client, &id, 2, SAVE_LIMIT).await;
    let template = layout_memory_blobs(&template.join("oci"));
    let (first, second) = (checkpoint_dir(state, &id, 1), checkpoint_dir(state, &id, 2));
    assert_eq!(
        inode(&memory_blobs(&first)[0]),
        inode(&template[0]),
        "the template's file is linked from the snapshot store"
    );
    assert_eq!(inode(&memory_blobs(&second)[0]), inode(&template[0]));
    assert!(
        memory_blobs(&second).contains(
            &second
                .join("state/oci/blobs/sha256")
                .join(own_blob(&first).file_name().unwrap())
        ),
        "checkpoint 2 maps its parent's pages"
    );
    for dir in [&first, &second] {
        let bytes = std::fs::metadata(own_blob(dir)).unwrap().len();
        eprintln!(
            "native: {} holds {bytes} bytes of its own on disk",
            dir.display()
        );
        assert!(bytes < 16 << 20, "{bytes} bytes of its own");
    }
    // A longer chain, past a fold and with its page tables in many pieces, for the restart to
    // read back.
    for n in 3..=LONG {
        let request = SessionExecRequest::new(format!("x = {n}"));
        let response = within("exec", STEP_LIMIT, client.session_exec(&id, &request))
            .await
            .unwrap();
        assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    }
    wait_durable(&client, &id, LONG, SAVE_LIMIT).await;
    id
}

/// The execs of the durable native session: past a fold (8 runs).
const LONG: u64 = 12;

/// How long saving the template (about a GiB) may take once the daemon serves.
const SAVE_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Thirty execs of a chain of checkpoints of the native guest (1 GiB), each the pages its exec
/// changed over its parent, with rollbacks, forks and a deleted origin on the way: every answer
/// is the model's (`hyperlightd_e2e::deltas`), and no checkpoint holds a copy of the guest
/// (which was 883 MiB).
#[tokio::test]
async fn thirty_execs_of_deltas_rolled_back_and_forked_match_a_reference() {
    // The model rolls back to any of the newest four checkpoints: all four are kept, whatever the
    // default budget per session.
    let daemon = native_daemon(&["--session-checkpoint-mib", "512"]).await;
    let client = daemon.client();
    hyperlightd_e2e::deltas::a_chain_of_deltas_matches_its_model(
        &client,
        Language::Python,
        30,
        64 << 20,
    )
    .await;
}

/// The docs' shell examples run as a reader would run them, on one daemon: the README's
/// five-minute tour through `hlctl` (every command succeeds, and one whose comment names a value
/// prints it), then the guides' curl examples (below).
#[tokio::test]
async fn the_docs_shell_examples_run_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("the README");
    let commands = tour_commands(&readme);
    assert!(commands.len() >= 7, "the tour's commands: {commands:?}");
    let daemon = Daemon::start_with_native_python(
        &["javascript=1", "python=1"],
        &["--default-timeout-ms", "30000"],
    )
    .await;
    let mut id = String::new();
    for (command, expected) in commands {
        let (assigns, command) = match command.strip_prefix("id=$(") {
            Some(inner) => (true, inner.strip_suffix(')').expect("id=$(...)").to_owned()),
            None => (false, command),
        };
        let words = shlex::split(&command).expect("a command the shell can split");
        assert_eq!(words[0], "hlctl", "{command}");
        let args: Vec<String> = words[1..]
            .iter()
            .map(|w| if w == "$id" { id.clone() } else { w.clone() })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = daemon.hlctl(&args, "").await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{command}: {:?}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if assigns {
            id = stdout.trim().to_owned();
        }
        if let Some(expected) = expected.filter(|e| e.parse::<Value>().is_ok()) {
            let last = stdout.lines().last().unwrap_or_default();
            assert_eq!(last, expected, "{command}");
        }
    }
    for guide in ["running-code.md", "sessions.md"] {
        the_guide_s_curl_examples_run(&daemon, guide).await;
    }
}

/// Each `sh` block of a guide that calls curl, run by bash against `daemon` as written (its
/// socket for the default path): every curl answered 2xx (the test's own `curl` function adds
/// `--fail-with-body`), and the answers carry, in order, the results the block's comments show.
async fn the_guide_s_curl_examples_run(daemon: &Daemon, guide: &str) {
    let path = format!("{}/../docs/guide/{guide}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("the guide");
    let blocks: Vec<&str> = text
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .filter(|block| block.contains("curl "))
        .collect();
    assert!(!blocks.is_empty(), "{guide}: no curl example");
    for block in blocks {
        let script = block.replace(
            "/run/hyperlightd/hyperlightd.sock",
            &daemon.socket().to_string_lossy(),
        );
        let prelude = "curl() { command curl -sS --fail-with-body \"$@\"; echo; }\n";
        let out = within(
            &format!("{guide}'s example"),
            STEP_LIMIT,
            tokio::process::Command::new("bash")
                .args(["-euo", "pipefail", "-c"])
                .arg(format!("{prelude}{script}"))
                .output(),
        )
        .await
        .expect("bash");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{guide}: {block}\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answers: Vec<Value> = stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let shown: Vec<Value> = block
            .lines()
            .filter_map(|line| line.trim().strip_prefix('#')?.split("\"result\": ").nth(1))
            .map(|rest| {
                rest.split([',', '}'])
                    .next()
                    .unwrap_or_default()
                    .parse()
                    .expect("a result")
            })
            .collect();
        let results: Vec<&Value> = answers.iter().filter_map(|a| a.get("result")).collect();
        let mut found = results.iter();
        for want in &shown {
            assert!(
                found.any(|got| *got == want),
                "{guide}: no answer with result {want} in order: {stdout}"
            );
        }
        assert!(
            !shown.is_empty(),
            "{guide}: a block shows no result: {block}"
        );
    }
}

/// The commands of the `sh` blocks under the README's "A five-minute tour", each with the value
/// its comment names (the comment's first word), if any.
fn tour_commands(readme: &str) -> Vec<(String, Option<String>)> {
    let tour = readme
        .split("\n## ")
        .find(|section| section.starts_with("A five-minute tour"))
        .expect("the README's tour");
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in tour.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            "" => {}
            line if in_sh => {
                let (command, comment) = match line.find("  #") {
                    Some(at) => (&line[..at], Some(line[at + 3..].trim())),
                    None => (line, None),
                };
                let expected = comment.and_then(|c| c.split_whitespace().next());
                commands.push((command.trim().to_owned(), expected.map(str::to_owned)));
            }
            _ => {}
        }
    }
    commands
}
