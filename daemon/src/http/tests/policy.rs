//! Who may call, how much, and what the audit log says of it, against the stub executor.

use hyper::header::RETRY_AFTER;
use serde_json::json;

use super::*;
use crate::audit::testing::{lines as audit_lines, log_in};
use crate::caller::{Access, ExecQuota};
use crate::job::{Placement, PodOf};
use crate::service::Callers;

const OTHER: Caller = Caller {
    uid: 2000,
    gid: 2000,
    pid: Some(5151),
    pod: crate::job::PodOf::Unread,
    on_behalf_of: None,
};

/// An API whose audit log is a file in `dir`, with `access` and an exec quota of `quota`.
fn api_with(
    dir: &tempfile::TempDir,
    access: Access,
    quota: usize,
) -> (Api<StubExecutor>, Arc<StubExecutor>, std::path::PathBuf) {
    let (api, executor, path, _) = api_and_quota(dir, access, quota);
    (api, executor, path)
}

/// [`api_with`], and the quota it counts in.
fn api_and_quota(
    dir: &tempfile::TempDir,
    access: Access,
    quota: usize,
) -> (
    Api<StubExecutor>,
    Arc<StubExecutor>,
    std::path::PathBuf,
    Arc<ExecQuota>,
) {
    let (service, executor) = service(echo_executor().with_session_quota(2));
    let (audit, path) = log_in(dir, false);
    let quota = ExecQuota::new(
        BTreeMap::from([(Language::Javascript, quota), (Language::Python, quota)]),
        None,
    );
    let callers = Callers {
        access,
        quota: quota.clone(),
        audit: Arc::new(audit),
    };
    (
        Api::of(service.with_callers(callers)),
        executor,
        path,
        quota,
    )
}

async fn call_as(
    api: &Api<StubExecutor>,
    caller: Caller,
    req: Request<Full<Bytes>>,
) -> Response<Body> {
    api.handle(req, caller).await
}

async fn body_of(response: Response<Body>) -> serde_json::Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

const EXEC: &str = r#"{"language":"javascript","code":"1 + 1"}"#;

#[tokio::test]
async fn a_caller_off_the_allow_list_is_refused_403_audited_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::new(&[CALLER.uid], &[], 999);
    let (api, executor, audit) = api_with(&dir, access, 8);
    for (method, path) in [
        (Method::POST, paths::EXEC),
        (Method::GET, paths::HEALTH),
        (Method::GET, paths::SESSIONS),
    ] {
        let response = call_as(&api, OTHER, request(method.clone(), path, EXEC)).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
        let body = body_of(response).await;
        assert_eq!(body["error"]["kind"], "caller_not_allowed");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("uid 2000") && message.contains("--allow-uid"),
            "{message}"
        );
    }
    assert!(executor.seen().is_empty(), "nothing ran");
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["audit"], "denied");
    assert_eq!(
        lines[0]["caller"],
        json!({"uid": 2000, "gid": 2000, "pid": 5151})
    );
    assert_eq!(lines[0]["path"], paths::EXEC);
    // The listed caller is served.
    let response = call_as(&api, CALLER, request(Method::POST, paths::EXEC, EXEC)).await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn past_its_quota_a_caller_gets_429_with_retry_after_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (api, executor, audit, quota) = api_and_quota(&dir, Access::default(), 2);
    // Two executions of CALLER in flight.
    let held = [
        quota
            .admit(&CALLER.principal(), Language::Javascript)
            .unwrap(),
        quota
            .admit(&CALLER.principal(), Language::Javascript)
            .unwrap(),
    ];
    let response = call_as(&api, CALLER, request(Method::POST, paths::EXEC, EXEC)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[RETRY_AFTER], "1");
    let body = body_of(response).await;
    assert_eq!(body["error"]["kind"], "quota_exceeded");
    assert!(executor.seen().is_empty(), "nothing ran");
    // Another caller, and another language, are not affected.
    let response = call_as(&api, OTHER, request(Method::POST, paths::EXEC, EXEC)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let python = r#"{"language":"python","code":"1"}"#;
    let response = call_as(&api, CALLER, request(Method::POST, paths::EXEC, python)).await;
    assert_eq!(response.status(), StatusCode::OK);
    // Once one finishes, the caller is served again, and its slot is given back.
    drop(held);
    let response = call_as(&api, CALLER, request(Method::POST, paths::EXEC, EXEC)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        quota.in_flight(&CALLER.principal(), Language::Javascript),
        0
    );
    let lines = audit_lines(&audit);
    assert_eq!(lines[0]["status"], "rejected");
    assert_eq!(lines[0]["error_kind"], "quota_exceeded");
    assert_eq!(lines[1]["status"], "ok");
}

/// CALLER's credentials, from a process in pod `pod`.
fn in_pod(pod: &str) -> Caller {
    Caller {
        pod: PodOf::Placed(Placement {
            pod: Some(pod.into()),
            container: Some("c0ffee".into()),
        }),
        ..CALLER
    }
}

#[tokio::test]
async fn by_pod_two_pods_of_one_uid_are_held_to_their_own_quotas_and_audited_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (api, executor, audit, quota) = api_and_quota(&dir, Access::default(), 1);
    let (a, b) = (in_pod("pod-a"), in_pod("pod-b"));
    let _held = quota.admit(&a.principal(), Language::Javascript).unwrap();
    // Pod a is at its quota; pod b, with the same uid, is not; nor is the uid outside pods.
    let response = call_as(&api, a.clone(), request(Method::POST, paths::EXEC, EXEC)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let message = body_of(response).await["error"]["message"].to_string();
    assert!(message.contains("this caller (pod pod-a)"), "{message}");
    for caller in [b, CALLER] {
        let response = call_as(&api, caller, request(Method::POST, paths::EXEC, EXEC)).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(executor.seen().len(), 2);
    let lines = audit_lines(&audit);
    let callers: Vec<_> = lines.iter().map(|l| l["caller"].clone()).collect();
    assert_eq!(
        callers,
        [
            json!({"uid": 1000, "gid": 1000, "pid": 4242, "pod": "pod-a", "container": "c0ffee"}),
            json!({"uid": 1000, "gid": 1000, "pid": 4242, "pod": "pod-b", "container": "c0ffee"}),
            json!({"uid": 1000, "gid": 1000, "pid": 4242}),
        ]
    );
}

#[tokio::test]
async fn by_pod_a_session_is_its_pods_whatever_the_uids() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _, audit) = api_with(&dir, Access::default(), 8);
    let create = || request(Method::POST, paths::SESSIONS, r#"{"language":"python"}"#);
    let response = call_as(&api, in_pod("pod-a"), create()).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = body_of(response).await["id"].as_str().unwrap().to_owned();
    let exec = || request(Method::POST, &paths::session_exec(&id), r#"{"code":"1"}"#);
    // Pod b and the same uid outside any pod: no such session.
    for other in [in_pod("pod-b"), CALLER] {
        assert_eq!(
            call_as(&api, other, exec()).await.status(),
            StatusCode::NOT_FOUND
        );
    }
    // Another process of pod a, with another uid: its pod's session.
    let sidecar = Caller {
        uid: 1001,
        ..in_pod("pod-a")
    };
    assert_eq!(
        call_as(&api, sidecar, exec()).await.status(),
        StatusCode::OK
    );
    let [created, ..] = &audit_lines(&audit)[..] else {
        panic!("no audit line");
    };
    assert_eq!(created["owner_pod"], "pod-a");
    assert!(created.get("owner_uid").is_none(), "{created}");
}

#[tokio::test]
async fn by_pod_a_caller_whose_pod_cannot_be_told_is_refused_403_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (api, executor, audit) = api_with(&dir, Access::default(), 8);
    let unknown = Caller {
        pod: PodOf::Unknown("the connecting process exited before its cgroup was read".into()),
        ..CALLER
    };
    let response = call_as(&api, unknown, request(Method::POST, paths::EXEC, EXEC)).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body = body_of(response).await;
    assert_eq!(body["error"]["kind"], "caller_not_allowed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("tells callers apart by pod") && message.contains("exited"),
        "{message}"
    );
    assert!(executor.seen().is_empty(), "nothing ran");
    let [line] = audit_lines(&audit).try_into().unwrap();
    assert_eq!(line["audit"], "denied");
    assert_eq!(line["caller"]["pod"], "unknown");
    assert!(
        line["caller"]["pod_error"]
            .as_str()
            .unwrap()
            .contains("exited")
    );
}

#[tokio::test]
async fn every_execution_has_an_audit_line_matching_its_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _, audit) = api_with(&dir, Access::default(), 8);
    let response = call_as(&api, CALLER, request(Method::POST, paths::EXEC, EXEC)).await;
    let request_id: u64 = response.headers()[REQUEST_ID_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let [line] = audit_lines(&audit).try_into().unwrap();
    assert_eq!(line["audit"], "exec");
    assert_eq!(line["request_id"], request_id);
    assert_eq!(line["caller"]["uid"], CALLER.uid);
    assert_eq!(line["language"], "javascript");
    assert_eq!(line["code_bytes"], 5);
    assert_eq!(line["code_sha256"].as_str().unwrap().len(), 64);
    assert!(
        line.get("code").is_none(),
        "the code only with --audit-code"
    );
    assert_eq!(line["status"], "ok");
    assert_eq!(line["error_kind"], serde_json::Value::Null);
    assert!(line["duration_ms"].as_f64().unwrap() >= 0.0);
}

#[tokio::test]
async fn sessions_are_their_callers_own_audited_and_held_to_a_quota() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _, audit) = api_with(&dir, Access::default(), 8);
    let create = || request(Method::POST, paths::SESSIONS, r#"{"language":"python"}"#);
    let response = call_as(&api, CALLER, create()).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = body_of(response).await["id"].as_str().unwrap().to_owned();
    // Another caller neither sees nor touches it.
    let other_exec = request(Method::POST, &paths::session_exec(&id), r#"{"code":"1"}"#);
    let response = call_as(&api, OTHER, other_exec).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let list = body_of(call_as(&api, OTHER, request(Method::GET, paths::SESSIONS, "")).await).await;
    assert_eq!(list["sessions"], json!([]));
    let response = call_as(
        &api,
        OTHER,
        request(Method::DELETE, &paths::session(&id), ""),
    )
    .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // Its owner runs an exec in it and rolls it back; another caller's rollback is refused,
    // and not audited.
    let exec = request(Method::POST, &paths::session_exec(&id), r#"{"code":"1"}"#);
    assert_eq!(call_as(&api, CALLER, exec).await.status(), StatusCode::OK);
    let rollback = || {
        let path = paths::session_rollback(&id);
        request(Method::POST, &path, r#"{"checkpoint":0}"#)
    };
    let response = call_as(&api, OTHER, rollback()).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        call_as(&api, CALLER, rollback()).await.status(),
        StatusCode::OK
    );
    // Two sessions per caller here (of 3 in all).
    assert_eq!(
        call_as(&api, CALLER, create()).await.status(),
        StatusCode::CREATED
    );
    let response = call_as(&api, CALLER, create()).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response.headers()[RETRY_AFTER],
        "60",
        "the first one's idle timeout"
    );
    assert_eq!(body_of(response).await["error"]["kind"], "quota_exceeded");
    let response = call_as(
        &api,
        CALLER,
        request(Method::DELETE, &paths::session(&id), ""),
    )
    .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let events: Vec<String> = audit_lines(&audit)
        .iter()
        .map(|l| format!("{} {}", l["audit"].as_str().unwrap(), l["caller"]["uid"]))
        .collect();
    assert_eq!(
        events,
        [
            "session_created 1000",
            "exec 1000",
            "session_rolled_back 1000",
            "session_created 1000",
            "session_deleted 1000"
        ]
    );
    let lines = audit_lines(&audit);
    assert_eq!(
        (&lines[1]["session"], &lines[1]["checkpoint"]),
        (&json!(id), &json!(0))
    );
    assert_eq!(
        (&lines[2]["session"], &lines[2]["checkpoint"]),
        (&json!(id), &json!(0))
    );
}

#[tokio::test]
async fn health_states_the_caller_limits_and_the_audit_logs_state() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _, audit) = api_with(&dir, Access::new(&[CALLER.uid], &[7], 999), 3);
    let health = body_of(call_as(&api, CALLER, request(Method::GET, paths::HEALTH, "")).await);
    let health = health.await;
    assert_eq!(
        health["caller_limits"],
        json!({"max_execs": {"javascript": 3, "python": 3}, "max_sessions": 2, "allow_list": true})
    );
    assert_eq!(health["audit"]["destination"], audit.display().to_string());
    assert_eq!(health["audit"]["failed_lines"], 0);
}

/// `request`, sent by a delegate acting for `name`.
fn acting_for(name: &str, mut req: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let value = HeaderValue::from_str(name).unwrap();
    req.headers_mut().insert(ON_BEHALF_OF_HEADER, value);
    req
}

#[tokio::test]
async fn only_a_delegate_may_act_for_another_and_each_name_is_a_caller_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let access = Access::default().with_delegates(&[OTHER.uid]);
    let (api, executor, audit) = api_with(&dir, access, 8);
    let create = || request(Method::POST, paths::SESSIONS, r#"{"language":"python"}"#);
    // CALLER is no delegate: refused, audited with the name it sent, nothing made.
    let response = call_as(&api, CALLER, acting_for("alice", create())).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let message = body_of(response).await["error"]["message"].to_string();
    assert!(message.contains("--delegate-uid"), "{message}");
    let [denied] = audit_lines(&audit).try_into().unwrap();
    assert_eq!(
        (&denied["audit"], &denied["caller"]["on_behalf_of"]),
        (&json!("denied"), &json!("alice"))
    );
    // A name that cannot be one: 400, whoever sends it.
    let response = call_as(&api, OTHER, acting_for("a b", create())).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    // The delegate, for alice: alice's session, audited as hers.
    let response = call_as(&api, OTHER, acting_for("alice", create())).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = body_of(response).await["id"].as_str().unwrap().to_owned();
    let created = audit_lines(&audit).pop().unwrap();
    assert_eq!(
        (&created["owner_uid"], &created["owner_for"]),
        (&json!(OTHER.uid), &json!("alice"))
    );
    let exec = || request(Method::POST, &paths::session_exec(&id), r#"{"code":"1"}"#);
    // Not bob's, not the delegate's own, not CALLER's.
    for (caller, req) in [
        (OTHER, acting_for("bob", exec())),
        (OTHER, exec()),
        (CALLER, exec()),
    ] {
        let response = call_as(&api, caller, req).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
    let list = || request(Method::GET, paths::SESSIONS, "");
    let listed = body_of(call_as(&api, OTHER, acting_for("bob", list())).await).await;
    assert_eq!(listed["sessions"], json!([]));
    assert!(executor.seen().is_empty(), "nothing ran");
    let response = call_as(&api, OTHER, acting_for("alice", exec())).await;
    assert_eq!(response.status(), StatusCode::OK);
    let exec_line = audit_lines(&audit).pop().unwrap();
    assert_eq!(exec_line["caller"]["on_behalf_of"], "alice");
}
