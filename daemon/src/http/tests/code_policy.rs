//! A request's policy at the API: refused when invalid or of another language, otherwise
//! combined with the daemon's default and handed to the executor with the job.

use hyper::{Method, StatusCode};
use hyperlightd_api::{ErrorKind, ErrorResponse, Policy, paths};

use super::{Api, StubExecutor, api, call, ok_outcome, request, service};

/// An executor that answers with the job's policy, as JSON, on stdout.
fn policy_echo() -> StubExecutor {
    StubExecutor::new(|job| {
        Ok(ok_outcome(
            &serde_json::to_string(&job.policy).unwrap(),
            serde_json::Value::Null,
        ))
    })
}

fn exec(body: &str) -> hyper::Request<http_body_util::Full<bytes::Bytes>> {
    request(Method::POST, paths::EXEC, body)
}

#[tokio::test]
async fn the_job_carries_the_default_policy_narrowed_by_the_request_s_for_its_language() {
    let default = Policy {
        allowed_modules: Some(vec!["json".into(), "math".into()]),
        blocked_functions: vec!["eval".into()],
        blocked_globals: vec!["Function".into()],
    };
    let (service, _) = service(policy_echo());
    let api = Api::of(service.with_code_policy(default.into()));
    let body = r#"{"language":"python","code":"1","policy":{"allowed_modules":["math","os"],
        "blocked_functions":["open"]}}"#;
    let (status, answer) = call(&api, exec(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let policy: Policy = serde_json::from_str(answer["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(policy.allowed_modules, Some(vec!["math".to_owned()]));
    assert_eq!(policy.blocked_functions, ["eval", "open"]);
    assert!(policy.blocked_globals.is_empty());

    let (_, answer) = call(&api, exec(r#"{"language":"javascript","code":"1"}"#)).await;
    let policy: Policy = serde_json::from_str(answer["stdout"].as_str().unwrap()).unwrap();
    assert_eq!(
        policy,
        Policy {
            blocked_globals: vec!["Function".into()],
            ..Policy::default()
        }
    );
}

#[tokio::test]
async fn no_policy_anywhere_checks_nothing() {
    let (api, _) = api(policy_echo());
    let (_, answer) = call(&api, exec(r#"{"language":"python","code":"1"}"#)).await;
    assert_eq!(answer["stdout"], "null");
}

#[tokio::test]
async fn an_invalid_policy_or_one_of_another_language_is_refused_and_nothing_runs() {
    let (api, executor) = api(policy_echo());
    for (body, says) in [
        (
            r#"{"language":"python","code":"1","policy":{"blocked_globals":["eval"]}}"#,
            "blocked_globals does not apply to python",
        ),
        (
            r#"{"language":"javascript","code":"1","policy":{"allowed_modules":[]}}"#,
            "allowed_modules does not apply to javascript",
        ),
        (
            r#"{"language":"python","code":"1","policy":{"allowed_modules":["os/path"]}}"#,
            "\"os/path\" is not a name",
        ),
        (
            r#"{"language":"python","code":"1","policy":{"blocked":["eval"]}}"#,
            "unknown field",
        ),
    ] {
        let (status, answer) = call(&api, exec(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let error: ErrorResponse = serde_json::from_value(answer).unwrap();
        assert_eq!(error.error.kind, ErrorKind::InvalidRequest);
        assert!(
            error.error.message.contains(says),
            "{}",
            error.error.message
        );
    }
    assert!(executor.seen().is_empty(), "nothing ran");
}
