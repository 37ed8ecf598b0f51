//! Packages at runtime (issue 57) in the WebAssembly Python guest: pure wheels only, unpacked by
//! the host into the session's working directory, from a loopback index of PyPI's wheels.

use hyperlightd_client::{Error, ErrorKind, ExecRequest, ExecStatus, Language, SessionExecRequest};
use hyperlightd_e2e::index::{TestIndex, pypi_wheels};
use hyperlightd_e2e::{STEP_LIMIT, new_session, py, run, within};
use serde_json::json;

use super::python_daemon;

#[tokio::test]
async fn pure_wheels_install_into_the_session_s_files_and_roll_back_with_them() {
    let index = TestIndex::serve(pypi_wheels()).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("wheels");
    let url = index.url();
    let daemon = python_daemon(&[
        "--package-index",
        &url,
        "--package-cache",
        cache.to_str().unwrap(),
    ])
    .await;
    let client = daemon.client();
    let id = new_session(&client, Language::Python).await;
    // A package's modules are compiled from source as they are imported (the guest writes no
    // bytecode): seconds for markdown-it-py's under emulation.
    let exec = |code: &str| {
        let request = SessionExecRequest {
            timeout_ms: Some(60_000),
            ..SessionExecRequest::new(code)
        };
        let client = client.clone();
        let id = id.clone();
        async move {
            let answer = within("exec", STEP_LIMIT, client.session_exec(&id, &request)).await;
            answer.unwrap()
        }
    };
    let first = exec(
        "%pip install markdown-it-py\nimport markdown_it\nmarkdown_it.MarkdownIt().render('*a*')",
    )
    .await;
    assert_eq!(first.status, ExecStatus::Ok, "{first:?}\n{}", daemon.log());
    assert_eq!(first.result, json!("<p><em>a</em></p>\n"));
    let checkpoint = first.session.unwrap().checkpoint;
    let next = exec("import mdurl\nmdurl.__version__").await;
    assert_eq!(next.result, json!("0.1.2"), "{next:?}");
    let listed = within("packages", STEP_LIMIT, client.session_packages(&id))
        .await
        .unwrap();
    let names: Vec<&str> = listed.packages.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["markdown-it-py", "mdurl"]);
    // Nothing of the packages' imports was written back as bytecode.
    let files = within("files", STEP_LIMIT, client.session_files(&id))
        .await
        .unwrap();
    assert!(
        files.files.iter().all(|f| !f.path.contains("__pycache__")),
        "{files:?}"
    );

    // A wheel with a C extension has no place here, and says so.
    let refused = within(
        "install",
        STEP_LIMIT,
        client.install_packages(&id, &["msgpack"]),
    )
    .await;
    match refused {
        Err(Error::Rejected { error, .. }) => {
            assert_eq!(error.kind, ErrorKind::PackageRefused);
            assert!(error.message.contains("pure Python"), "{}", error.message);
        }
        other => panic!("msgpack: {other:?}"),
    }
    // A rollback to before the install removes it.
    within(
        "rollback",
        STEP_LIMIT,
        client.rollback_session(&id, checkpoint - 1),
    )
    .await
    .unwrap();
    let gone = exec("import importlib.util\nimportlib.util.find_spec('markdown_it') is None").await;
    assert_eq!(gone.result, json!(true), "{gone:?}");
    // A plain exec installs for itself only.
    let plain = ExecRequest {
        packages: vec!["mdurl".into()],
        timeout_ms: Some(60_000),
        ..py("import mdurl\nmdurl.__version__")
    };
    assert_eq!(run(&daemon, plain).await.result, json!("0.1.2"));
}
