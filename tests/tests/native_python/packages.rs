//! Packages installed at runtime (issue 57) in the native Python guest: real wheels from PyPI
//! served by a loopback index (tests/src/index.rs), resolved and fetched by the daemon, unpacked
//! in the session.

use std::time::Duration;

use hyperlightd_client::{
    Client, Error, ErrorKind, ExecRequest, ExecStatus, InstallResponse, Language,
    SessionExecRequest,
};
use hyperlightd_e2e::index::{Listed, TestIndex, pypi_wheels, sha256_hex};
use hyperlightd_e2e::{STEP_LIMIT, audit_lines, new_session, py, run, within};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::{native_daemon, value};

/// An install, through the API; its answer or why it was refused (kind, message).
async fn install(
    client: &Client,
    id: &str,
    requirements: &[&str],
) -> Result<InstallResponse, (ErrorKind, String)> {
    let installed = within(
        "install",
        STEP_LIMIT,
        client.install_packages(id, requirements),
    )
    .await;
    installed.map_err(|e| match e {
        Error::Rejected { error, .. } => (error.kind, error.message),
        other => panic!("the install of {requirements:?} failed: {other}"),
    })
}

/// The session's newest checkpoint, once the execs before have saved theirs.
async fn newest(client: &Client, id: &str) -> u64 {
    let checkpoints = within("checkpoints", STEP_LIMIT, client.session_checkpoints(id)).await;
    checkpoints.unwrap().last().unwrap().checkpoint
}

fn names(installed: &InstallResponse) -> Vec<String> {
    let names = installed.installed.iter();
    names
        .map(|p| format!("{}=={}", p.name, p.version))
        .collect()
}

/// The files the index lists besides PyPI's wheels: a package denied by the daemon, one with
/// only a wheel for another platform, one with only a source distribution, one whose listed
/// hash is not its bytes', and one larger than the daemon installs.
fn awkward_files(pypi: &[Listed]) -> Vec<Listed> {
    let mdurl = pypi
        .iter()
        .find(|w| w.filename.starts_with("mdurl"))
        .expect("mdurl");
    let mut tampered = Listed::new("tampered-0.1.2-py3-none-any.whl", mdurl.bytes.clone());
    tampered.sha256 = sha256_hex(b"something else");
    vec![
        Listed::new("evil-1.0-py3-none-any.whl", mdurl.bytes.clone()),
        Listed::new("winonly-1.0-cp311-cp311-win_amd64.whl", mdurl.bytes.clone()),
        Listed::new("only_source-1.0.tar.gz", &b"an sdist"[..]),
        tampered,
        Listed::new("huge-1.0-py3-none-any.whl", vec![7u8; 3 << 19]),
    ]
}

#[tokio::test]
async fn packages_install_from_the_index_and_live_in_the_session_s_checkpoints() {
    let pypi = pypi_wheels();
    let mut files = pypi.clone();
    files.extend(awkward_files(&pypi));
    let index = TestIndex::serve(files).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("wheels");
    let audit = dir.path().join("audit.log");
    let url = index.url();
    let daemon = native_daemon(&[
        "--package-index",
        &url,
        "--package-deny",
        "evil",
        "--package-max-wheel-mib",
        "1",
        "--package-cache",
        cache.to_str().unwrap(),
        "--audit-log",
        audit.to_str().unwrap(),
    ])
    .await;
    let client = daemon.client();
    let health = within("health", STEP_LIMIT, client.health()).await.unwrap();
    let packages = health.installs.expect("health states the installs");
    assert_eq!(
        (packages.indexes, packages.deny),
        (vec![url.clone()], vec!["evil".into()])
    );

    let id = new_session(&client, Language::Python).await;
    // `%pip install` in a program: installed, then the rest of it runs; the dependency too.
    let program = "%pip install -q markdown-it-py==3.0.0\nimport markdown_it, mdurl\n\
                   markdown_it.MarkdownIt().render('# hi')";
    let request = SessionExecRequest {
        timeout_ms: Some(60_000),
        ..SessionExecRequest::new(program)
    };
    let answer = within("pip exec", STEP_LIMIT, client.session_exec(&id, &request)).await;
    let answer = answer.unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()));
    assert_eq!(answer.status, ExecStatus::Ok, "{answer:?}");
    assert_eq!(answer.result, json!("<h1>hi</h1>\n"));
    assert!(
        answer
            .stdout
            .contains("Successfully installed markdown-it-py-3.0.0 mdurl-0.1.2"),
        "{answer:?}"
    );
    assert_eq!(
        value(&daemon, &id, "import mdurl\nmdurl.__version__").await,
        json!("0.1.2")
    );

    // Through the API: a C extension, and a package whose numpy the runtime has.
    let before = newest(&client, &id).await;
    let installed = install(&client, &id, &["msgpack==1.1.0", "numpy-financial"])
        .await
        .unwrap();
    assert_eq!(
        names(&installed),
        ["msgpack==1.1.0", "numpy-financial==1.0.0"]
    );
    assert!(installed.installed.iter().all(|p| !p.cached));
    assert_eq!(installed.checkpoint, before + 1);
    let read = "import msgpack, msgpack._cmsgpack, numpy_financial as npf\n\
                [msgpack.unpackb(msgpack.packb([1, 2])), round(float(npf.pmt(0.05 / 12, 60, 10000)), 2)]";
    assert_eq!(value(&daemon, &id, read).await, json!([[1, 2], -188.71]));
    let again = install(&client, &id, &["msgpack"]).await.unwrap();
    assert!(again.installed.is_empty(), "{again:?}");
    assert_eq!(again.present[0].name, "msgpack");
    let manifest = within(
        "file",
        STEP_LIMIT,
        client.session_file(&id, ".hyperlightd/packages.json"),
    )
    .await
    .unwrap();
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest.as_array().unwrap().len(), 4, "{manifest}");
    let listed = within("packages", STEP_LIMIT, client.session_packages(&id))
        .await
        .unwrap();
    let listed: Vec<&str> = listed.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        listed,
        ["markdown-it-py", "mdurl", "msgpack", "numpy-financial"]
    );
    let session = within("session", STEP_LIMIT, client.session(&id))
        .await
        .unwrap();
    let shown: Vec<&str> = session.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        shown, listed,
        "GET /v1/sessions/{{id}} shows what it installed"
    );

    // A fork keeps them; a rollback past the install removes them, and the next install of
    // the same wheel asks the index nothing.
    let fork = within("fork", STEP_LIMIT, client.fork_session(&id))
        .await
        .unwrap()
        .id;
    assert_eq!(
        value(&daemon, &fork, "import msgpack\nmsgpack.version").await,
        json!([1, 1, 0])
    );
    within("rollback", STEP_LIMIT, client.rollback_session(&id, before))
        .await
        .unwrap();
    let gone = "import importlib.util\nimportlib.util.find_spec('msgpack') is None";
    assert_eq!(value(&daemon, &id, gone).await, json!(true));
    let listed = within("packages", STEP_LIMIT, client.session_packages(&id))
        .await
        .unwrap();
    assert_eq!(listed.packages.len(), 2, "{listed:?}");
    let session = within("session", STEP_LIMIT, client.session(&id))
        .await
        .unwrap();
    assert_eq!(session.packages, listed.packages);
    let asked = index.requests();
    let cached = install(&client, &id, &["msgpack==1.1.0"]).await.unwrap();
    assert!(cached.installed[0].cached, "{cached:?}");
    assert_eq!(index.requests(), asked, "a second install asked the index");
    assert_eq!(
        value(&daemon, &id, "import msgpack\nmsgpack.version").await,
        json!([1, 1, 0])
    );
    assert!(daemon.metric("hyperlightd_package_cache_hits_total").await >= 1.0);

    // What cannot be installed is refused with its reason, and changes nothing.
    let at = newest(&client, &id).await;
    for (requirement, says) in [
        ("evil", "deny list"),
        ("winonly", "none of its wheels"),
        ("only-source", "only source distributions"),
        ("tampered", "do not match the SHA-256"),
        ("huge", "larger than the daemon installs"),
        ("absent", "no package index"),
        ("numpy==1.0", "the runtime has numpy"),
    ] {
        let (kind, message) = install(&client, &id, &[requirement]).await.unwrap_err();
        assert_eq!(kind, ErrorKind::PackageRefused, "{requirement}: {message}");
        assert!(message.contains(says), "{requirement}: {message}");
    }
    let now = newest(&client, &id).await;
    assert_eq!(now, at, "a refused install changed the session");
    // A program whose `%pip install` is refused does not run.
    let refused = SessionExecRequest::new("%pip install absent\nopen('ran', 'w').write('x')");
    let error = within("exec", STEP_LIMIT, client.session_exec(&id, &refused))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Rejected { status: 422, .. }),
        "{error}"
    );
    let listed = within("files", STEP_LIMIT, client.session_files(&id))
        .await
        .unwrap();
    assert!(listed.files.iter().all(|f| f.path != "ran"), "{listed:?}");

    // A plain exec installs for itself only.
    let plain = run(
        &daemon,
        py("%pip install mdurl\nimport mdurl\nmdurl.__version__"),
    )
    .await;
    assert_eq!(plain.result, json!("0.1.2"), "{plain:?}");
    // Or names them beside its code.
    let named = ExecRequest {
        packages: vec!["numpy-financial".into()],
        ..py("import numpy_financial\nnumpy_financial.__version__")
    };
    let named = run(&daemon, named).await;
    assert_eq!(named.result, json!("1.0.0"), "{named:?}");
    let after = run(
        &daemon,
        py("import importlib.util\nimportlib.util.find_spec('mdurl') is None"),
    )
    .await;
    assert_eq!(after.result, json!(true), "{after:?}");

    let lines = audit_lines(&audit);
    let installs: Vec<&Value> = lines.iter().filter(|l| l["audit"] == "install").collect();
    let outcomes: Vec<&str> = installs
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    for outcome in [
        "installed",
        "present",
        "denied",
        "no_wheel",
        "hash_mismatch",
        "too_large",
    ] {
        assert!(outcomes.contains(&outcome), "{outcome} not in {outcomes:?}");
    }
    let first = installs
        .iter()
        .find(|l| l["outcome"] == "installed")
        .unwrap();
    assert_eq!(first["session"], json!(id));
    let msgpack = &pypi
        .iter()
        .find(|w| w.filename.starts_with("msgpack"))
        .unwrap()
        .sha256;
    assert!(
        installs.iter().any(|l| l["packages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["sha256"] == json!(msgpack))),
        "{installs:?}"
    );
    // A program's install is told once, when its exec has ended.
    let plain = installs
        .iter()
        .filter(|l| l["session"].is_null() && l["requirements"] == json!(["mdurl"]))
        .count();
    assert_eq!(plain, 1, "{installs:?}");
    // Every request to the index is an egress line of the install's caller.
    let egress: Vec<&Value> = lines.iter().filter(|l| l["audit"] == "egress").collect();
    let page = egress
        .iter()
        .find(|l| l["path"] == "/simple/msgpack/")
        .unwrap_or_else(|| panic!("no egress line for msgpack's page: {egress:?}"));
    assert_eq!(
        (page["method"].clone(), page["status"].clone()),
        (json!("GET"), json!(200))
    );
    let asked = installs
        .iter()
        .find(|l| l["requirements"] == json!(["msgpack==1.1.0", "numpy-financial"]))
        .unwrap();
    assert_eq!(page["request_id"], asked["request_id"], "{page}");
    assert_eq!(page["caller"], asked["caller"], "{page}");
    assert!(
        egress
            .iter()
            .any(|l| l["path"].as_str().is_some_and(|p| p.ends_with(".whl"))
                && l["bytes_received"].as_u64() > Some(0)),
        "{egress:?}"
    );
}

#[tokio::test]
async fn without_an_index_an_install_says_how_to_turn_installs_on() {
    let daemon = native_daemon(&[]).await;
    let client = daemon.client();
    let id = new_session(&client, Language::Python).await;
    let (kind, message) = install(&client, &id, &["msgpack"]).await.unwrap_err();
    assert_eq!(kind, ErrorKind::PackageRefused);
    assert!(message.contains("--package-index"), "{message}");
    let health = within("health", STEP_LIMIT, client.health()).await.unwrap();
    assert!(health.installs.is_none());
}

#[tokio::test]
async fn an_install_is_on_disk_with_its_session_and_its_wheel_in_the_cache_after_a_restart() {
    let index = TestIndex::serve(pypi_wheels()).await;
    let dir = tempfile::tempdir().unwrap();
    let (cache, state) = (dir.path().join("wheels"), dir.path().join("state"));
    let url = index.url();
    let args = [
        "--package-index",
        &url,
        "--package-cache",
        cache.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let daemon = native_daemon(&args).await;
    let client = daemon.client();
    let id = new_session(&client, Language::Python).await;
    let installed = install(&client, &id, &["mdurl"]).await.unwrap();
    assert_eq!(names(&installed), ["mdurl==0.1.2"]);
    // A clean stop writes the session's newest checkpoint before the daemon exits.
    let mut daemon = daemon;
    daemon.signal(Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(120)).await;
    assert_eq!(status, Some(0), "{}", daemon.log());
    drop(daemon);

    let daemon = native_daemon(&args).await;
    let client = daemon.client();
    // Before its state is brought back, the session's packages are read from disk.
    let session = within("session", STEP_LIMIT, client.session(&id))
        .await
        .unwrap();
    assert!(session.parked, "{session:?}");
    let shown: Vec<&str> = session.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(shown, ["mdurl"]);
    let read = "import mdurl\nmdurl.__version__";
    assert_eq!(value(&daemon, &id, read).await, json!("0.1.2"));
    // A new session's install of the same package takes the wheel from the cache on disk.
    let other = new_session(&client, Language::Python).await;
    let again = install(&client, &other, &["mdurl"]).await.unwrap();
    assert!(again.installed[0].cached, "{again:?}");
}
