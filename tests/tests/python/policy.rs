//! Policies checked before a program runs (issue 16): the guest parses the program and refuses
//! what it names, with every violation's line; nothing of a refused program runs.

use hyperlightd_client::{CreateSessionRequest, Policy, SessionExecRequest, Violation};

use super::*;

fn violation(line: u32, rule: &str, name: &str) -> Violation {
    Violation {
        line,
        rule: rule.to_owned(),
        name: name.to_owned(),
    }
}

/// The violations of a program refused by its policy: it must not have run.
fn violations_of(refused: hyperlightd_client::ExecResponse) -> Vec<Violation> {
    assert_eq!(refused.status, ExecStatus::Error, "{refused:?}");
    assert_eq!(refused.stdout, "", "nothing ran");
    let error = refused.error.unwrap();
    assert_eq!(error.kind, ErrorKind::PolicyViolation);
    assert!(error.message.contains("line "), "{}", error.message);
    error.violations
}

fn with_policy(request: ExecRequest, policy: Policy) -> ExecRequest {
    ExecRequest {
        policy: Some(policy),
        ..request
    }
}

#[tokio::test]
async fn python_imports_and_functions_are_refused_with_their_lines_also_in_a_session() {
    // The daemon's default blocks compile(); requests narrow it.
    let dir = tempfile::tempdir().unwrap();
    let default = dir.path().join("policy.json");
    std::fs::write(&default, r#"{"blocked_functions": ["compile"]}"#).unwrap();
    let daemon = python_daemon(&["--policy", default.to_str().unwrap()]).await;
    let policy = Policy {
        allowed_modules: Some(vec!["json".into(), "os.path".into()]),
        blocked_functions: vec!["eval".into(), "open".into()],
        blocked_globals: Vec::new(),
    };
    let code = "print('ran')\nimport os.path, socket\nfrom . import sibling\nx = eval('1')\n\
                f = open\nc = compile('1', 'x', 'eval')\n__import__('sys')";
    let refused = run(&daemon, with_policy(py(code), policy.clone())).await;
    assert_eq!(
        violations_of(refused),
        [
            violation(2, "allowed_modules", "socket"),
            violation(3, "allowed_modules", "."),
            violation(4, "blocked_functions", "eval"),
            violation(5, "blocked_functions", "open"),
            violation(6, "blocked_functions", "compile"),
            violation(7, "allowed_modules", "__import__"),
        ]
    );

    let passes = "import json\nimport os.path\nprint(os.path.join('a', 'b'))\njson.dumps([1])";
    let ran = run(&daemon, with_policy(py(passes), policy.clone())).await;
    assert_eq!(ran.status, ExecStatus::Ok, "{ran:?}");
    assert_eq!((ran.stdout.as_str(), &ran.result), ("a/b\n", &json!("[1]")));

    let default_only = run(&daemon, py("compile('1', 'x', 'eval')")).await;
    assert_eq!(
        default_only.error.map(|e| (e.kind, e.violations)),
        Some((
            ErrorKind::PolicyViolation,
            vec![violation(1, "blocked_functions", "compile")]
        ))
    );

    let client = daemon.client();
    let session = client
        .create_session(&CreateSessionRequest::new(Language::Python))
        .await
        .unwrap();
    let exec = |code: &str, policy: Option<Policy>| SessionExecRequest {
        policy,
        ..SessionExecRequest::new(code)
    };
    let set = client
        .session_exec(&session.id, &exec("x = 1", None))
        .await
        .unwrap();
    assert_eq!(set.status, ExecStatus::Ok, "{set:?}");
    let refused = client
        .session_exec(&session.id, &exec("x = 2\nimport socket", Some(policy)))
        .await
        .unwrap();
    assert_eq!(
        refused.error.map(|e| e.violations),
        Some(vec![violation(2, "allowed_modules", "socket")])
    );
    let kept = client
        .session_exec(&session.id, &exec("x", None))
        .await
        .unwrap();
    assert_eq!(kept.result, json!(1), "the refused exec changed nothing");
}

#[tokio::test]
async fn javascript_globals_are_refused_with_their_lines_but_properties_of_that_name_are_not() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let policy = Policy {
        blocked_globals: vec!["eval".into(), "Function".into()],
        ..Policy::default()
    };
    let js = |code: &str| with_policy(ExecRequest::new(Language::Javascript, code), policy.clone());
    let code = "console.log('ran');\nconst f = Function('return 1');\nglobalThis['eval']('2');\n\
                const g = { eval };";
    let refused = run(&daemon, js(code)).await;
    assert_eq!(
        violations_of(refused),
        [
            violation(2, "blocked_globals", "Function"),
            violation(3, "blocked_globals", "eval"),
            violation(4, "blocked_globals", "eval"),
        ]
    );

    let passes =
        "const o = { eval: 1 };\nclass C { Function() { return 2; } }\no.eval + new C().Function()";
    let ran = run(&daemon, js(passes)).await;
    assert_eq!(ran.status, ExecStatus::Ok, "{ran:?}");
    assert_eq!(ran.result, json!(3));

    let unparsable = run(&daemon, js("const = ;")).await;
    assert_eq!(
        unparsable.error.map(|e| e.kind),
        Some(ErrorKind::SyntaxError)
    );
}
