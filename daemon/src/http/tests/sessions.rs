//! The session endpoints against the stub executor, whose session table is real.

use super::*;

async fn create(api: &Api<StubExecutor>, body: &str) -> (StatusCode, serde_json::Value) {
    call(api, request(Method::POST, paths::SESSIONS, body)).await
}

#[tokio::test]
async fn a_session_is_created_read_listed_used_and_deleted() {
    let (api, executor) = api(echo_executor());
    let response = api
        .handle_from_test_caller(request(
            Method::POST,
            paths::SESSIONS,
            r#"{"language":"python"}"#,
        ))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()[LOCATION].to_str().unwrap().to_owned();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let info: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let id = info["id"].as_str().unwrap().to_owned();
    assert_eq!(location, paths::session(&id));
    assert_eq!(info["language"], "python");
    assert_eq!(info["idle_timeout_s"], 60);
    assert!(
        info["created_at"].as_str().unwrap().ends_with('Z'),
        "{info}"
    );

    let (status, read) = call(&api, request(Method::GET, &location, "")).await;
    assert_eq!((status, &read["id"]), (StatusCode::OK, &info["id"]));
    let (status, list) = call(&api, request(Method::GET, paths::SESSIONS, "")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);

    let exec = paths::session_exec(&id);
    let (status, body) = call(&api, request(Method::POST, &exec, r#"{"code":"x = 1"}"#)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["session"],
        serde_json::json!({"id": id, "rolled_back": false, "checkpoint": 0})
    );
    let seen = executor.seen().clone();
    assert_eq!(
        seen.last().unwrap().0,
        Language::Python,
        "the session's language"
    );

    let response = api
        .handle_from_test_caller(request(Method::DELETE, &location, ""))
        .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    for (method, path, body) in [
        (Method::GET, location.clone(), ""),
        (Method::DELETE, location.clone(), ""),
        (Method::POST, exec.clone(), r#"{"code":"x"}"#),
        (Method::POST, paths::session_fork(&id), ""),
        (Method::GET, paths::session_checkpoints(&id), ""),
        (
            Method::POST,
            paths::session_rollback(&id),
            r#"{"checkpoint":0}"#,
        ),
    ] {
        let (status, body) = call(&api, request(method, &path, body)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"]["kind"], "session_not_found", "{path}");
    }
}

#[tokio::test]
async fn bad_session_requests_are_refused_with_what_was_wrong() {
    let (api, _) = api(echo_executor());
    for (body, needle) in [
        (r#"{"language":"cobol"}"#, "unknown language"),
        (
            r#"{"language":"python","idle_timeout_s":0}"#,
            "at least 1 second",
        ),
        (
            r#"{"language":"python","color":"red"}"#,
            "unknown field `color`",
        ),
        ("{", "EOF"),
    ] {
        let (status, response) = create(&api, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let (_, info) = create(&api, r#"{"language":"javascript","idle_timeout_s":99999}"#).await;
    assert_eq!(info["idle_timeout_s"], 600, "capped at the maximum");
    let exec = paths::session_exec(info["id"].as_str().unwrap());
    let (status, body) = call(
        &api,
        request(Method::POST, &exec, r#"{"language":"python","code":"1"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `language`")
    );
    let (status, body) = call(&api, request(Method::GET, &exec, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("accepts POST"),
        "{body}"
    );
    let (status, _) = call(&api, request(Method::PUT, paths::SESSIONS, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = call(&api, request(Method::GET, "/v1/sessions/x/y", "")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_session_s_idle_timeout_is_set_again_and_bad_settings_change_nothing() {
    let (api, _) = api(echo_executor());
    let (_, info) = create(&api, r#"{"language":"python","idle_timeout_s":60}"#).await;
    let session = paths::session(info["id"].as_str().unwrap());
    let patch = |body: &'static str| request(Method::PATCH, &session, body);
    let (status, set) = call(&api, patch(r#"{"idle_timeout_s": 30}"#)).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["idle_timeout_s"], 30);
    let (_, capped) = call(&api, patch(r#"{"idle_timeout_s": 99999}"#)).await;
    assert_eq!(capped["idle_timeout_s"], 600, "capped at the maximum");
    for (body, needle) in [
        (r#"{"idle_timeout_s": 0}"#, "at least 1 second"),
        (
            r#"{"idle_timeout_s": 5, "labels": {}}"#,
            "unknown field `labels`",
        ),
        (r#"{}"#, "missing field `idle_timeout_s`"),
    ] {
        let (status, refused) = call(&api, patch(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let (_, kept) = call(&api, request(Method::GET, &session, "")).await;
    assert_eq!(kept["idle_timeout_s"], 600);
    let (status, _) = call(
        &api,
        request(
            Method::PATCH,
            &paths::session("nope"),
            r#"{"idle_timeout_s": 5}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = call(&api, request(Method::PUT, &session, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("GET, PATCH, DELETE"),
        "{body}"
    );
}

#[tokio::test]
async fn past_the_session_limit_creating_and_forking_are_refused_with_429() {
    let (api, _) = api(echo_executor());
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, info) = create(&api, r#"{"language":"javascript"}"#).await;
        assert_eq!(status, StatusCode::CREATED);
        ids.push(info["id"].as_str().unwrap().to_owned());
    }
    let (status, body) = create(&api, r#"{"language":"javascript"}"#).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["error"]["kind"], "too_many_sessions");
    let fork = paths::session_fork(&ids[0]);
    let (status, _) = call(&api, request(Method::POST, &fork, "")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let response = api
        .handle_from_test_caller(request(Method::DELETE, &paths::session(&ids[1]), ""))
        .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let (status, forked) = call(&api, request(Method::POST, &fork, "")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(forked["id"], ids[0].as_str());
    let (_, health) = call(&api, request(Method::GET, paths::HEALTH, "")).await;
    assert_eq!(health["sessions"]["javascript"]["live"], 3);
    assert_eq!(health["session_limits"]["max_sessions"], 3);
    assert_eq!(health["session_limits"]["max_checkpoints"], 4);
}

#[tokio::test]
async fn a_draining_daemon_creates_and_runs_no_sessions_but_still_deletes_them() {
    let (api, _) = api(echo_executor());
    let (_, info) = create(&api, r#"{"language":"python"}"#).await;
    let id = info["id"].as_str().unwrap().to_owned();
    api.drain();
    let (status, _) = create(&api, r#"{"language":"python"}"#).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, _) = call(
        &api,
        request(Method::POST, &paths::session_exec(&id), r#"{"code":"1"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let response = api
        .handle_from_test_caller(request(Method::DELETE, &paths::session(&id), ""))
        .await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn checkpoints_are_listed_rolled_back_to_and_forked_from_and_bad_requests_change_nothing() {
    let (api, _) = api(echo_executor());
    let (_, info) = create(&api, r#"{"language":"python"}"#).await;
    assert_eq!(
        (&info["checkpoint"], &info["checkpoints"]),
        (&0.into(), &1.into())
    );
    let id = info["id"].as_str().unwrap().to_owned();
    let (status, list) = call(
        &api,
        request(Method::GET, &paths::session_checkpoints(&id), ""),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let checkpoints = list["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 1, "{list}");
    assert_eq!(
        (&checkpoints[0]["checkpoint"], &checkpoints[0]["bytes"]),
        (&0.into(), &0.into())
    );
    assert!(checkpoints[0].get("parent").is_none(), "{list}");

    let rollback = paths::session_rollback(&id);
    let (status, back) = call(
        &api,
        request(Method::POST, &rollback, r#"{"checkpoint":0}"#),
    )
    .await;
    assert_eq!((status, &back["checkpoint"]), (StatusCode::OK, &0.into()));
    let (status, body) = call(
        &api,
        request(Method::POST, &rollback, r#"{"checkpoint":7}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["kind"], "checkpoint_not_found");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no checkpoint 7; it keeps 0."),
        "{message}"
    );
    for bad in [
        "{}",
        r#"{"checkpoint":-1}"#,
        r#"{"checkpoint":1,"x":2}"#,
        "",
    ] {
        let (status, body) = call(&api, request(Method::POST, &rollback, bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = call(&api, request(Method::GET, &rollback, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");

    let fork = paths::session_fork(&id);
    let (status, body) = call(&api, request(Method::POST, &fork, r#"{"checkpoint":3}"#)).await;
    assert_eq!(
        (status, &body["error"]["kind"]),
        (StatusCode::NOT_FOUND, &"checkpoint_not_found".into())
    );
    let (status, body) = call(&api, request(Method::POST, &fork, r#"{"from":0}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, list) = call(&api, request(Method::GET, paths::SESSIONS, "")).await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        1,
        "refused forks made nothing"
    );
    let (status, forked) = call(&api, request(Method::POST, &fork, r#"{"checkpoint":0}"#)).await;
    assert_eq!(
        (status, &forked["checkpoint"]),
        (StatusCode::CREATED, &0.into())
    );
    let (status, _) = call(&api, request(Method::POST, &fork, " \n")).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "an empty body forks the newest"
    );
}

#[tokio::test]
async fn sessions_are_found_by_their_labels() {
    let (api, _) = api(echo_executor());
    let (status, a) = create(
        &api,
        r#"{"language":"python","labels":{"conversation":"c 1","example.com/user":"ana"}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    assert_eq!(a["labels"]["conversation"], "c 1");
    let (_, b) = create(
        &api,
        r#"{"language":"python","labels":{"conversation":"c2"}}"#,
    )
    .await;
    let (_, plain) = create(&api, r#"{"language":"javascript"}"#).await;
    assert!(
        plain.get("labels").is_none(),
        "no labels, no field: {plain}"
    );
    let ids = |list: &serde_json::Value| -> Vec<String> {
        let sessions = list["sessions"].as_array().unwrap();
        sessions
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect()
    };
    for (query, expected) in [
        ("", vec![&a, &b, &plain]),
        ("?label=conversation=c%201", vec![&a]),
        (
            "?label=conversation=c+1&label=example.com%2Fuser=ana",
            vec![&a],
        ),
        ("?label=conversation=c2", vec![&b]),
        ("?label=conversation=c3", vec![]),
    ] {
        let path = format!("{}{query}", paths::SESSIONS);
        let (status, list) = call(&api, request(Method::GET, &path, "")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {list}");
        // Oldest first, to the millisecond: those made in the same one come in any order.
        let mut expected: Vec<String> = expected
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect();
        let mut found = ids(&list);
        expected.sort();
        found.sort();
        assert_eq!(found, expected, "{query}");
    }
    // The stub's limit is three sessions a caller: room for the fork.
    let plain = paths::session(plain["id"].as_str().unwrap());
    call(&api, request(Method::DELETE, &plain, "")).await;
    let fork = paths::session_fork(a["id"].as_str().unwrap());
    let (status, forked) = call(&api, request(Method::POST, &fork, "")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        forked["labels"], a["labels"],
        "a fork has its origin's labels"
    );
}

#[tokio::test]
async fn bad_labels_and_bad_filters_are_refused_and_change_nothing() {
    let (api, _) = api(echo_executor());
    for (body, needle) in [
        (
            r#"{"language":"python","labels":{"a b":"1"}}"#,
            r#"label name "a b""#,
        ),
        (
            r#"{"language":"python","labels":{"a":"x\ny"}}"#,
            "control character",
        ),
        (r#"{"language":"python","labels":{"a":1}}"#, "invalid type"),
    ] {
        let (status, response) = create(&api, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    for (query, needle) in [
        ("?color=red", "unknown query parameter \"color\""),
        ("?label=conversation", "label=NAME=VALUE"),
        ("?label=a=1&label=a=2", "asked for twice"),
        ("?label=-a=1", "label name \"-a\""),
        ("?label=a=%FF", "not UTF-8"),
    ] {
        let path = format!("{}{query}", paths::SESSIONS);
        let (status, response) = call(&api, request(Method::GET, &path, "")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{query}: {message}");
    }
    let (_, list) = call(&api, request(Method::GET, paths::SESSIONS, "")).await;
    assert_eq!(
        list["sessions"].as_array().unwrap().len(),
        0,
        "nothing was created"
    );
}

#[tokio::test]
async fn env_reaches_the_program_the_sessions_under_the_execs_and_bad_env_runs_nothing() {
    let (api, executor) = api(StubExecutor::new(|job| {
        Ok(ok_outcome("", serde_json::json!(job.env.as_map())))
    }));
    let (status, plain) = call(
        &api,
        request(
            Method::POST,
            paths::EXEC,
            r#"{"language":"python","code":"x","env":{"A":"1"}}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(plain["result"], serde_json::json!({"A": "1"}));

    let (status, info) = create(
        &api,
        r#"{"language":"python","env":{"MODE":"session","KEEP":"k"}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{info}");
    assert_eq!(
        info["env"],
        serde_json::json!({"MODE": "session", "KEEP": "k"})
    );
    let id = info["id"].as_str().unwrap().to_owned();
    let exec = paths::session_exec(&id);
    let body = r#"{"code":"x","env":{"MODE":"exec"}}"#;
    let (status, ran) = call(&api, request(Method::POST, &exec, body)).await;
    assert_eq!(status, StatusCode::OK, "{ran}");
    assert_eq!(
        ran["result"],
        serde_json::json!({"MODE": "exec", "KEEP": "k"})
    );
    let (_, forked) = call(&api, request(Method::POST, &paths::session_fork(&id), "")).await;
    assert_eq!(forked["env"], info["env"], "a fork has its origin's env");

    // Bounds past the body limit of these tests are the unit tests' (job::env, session's).
    let runs = executor.seen().len();
    for (path, body, needle) in [
        (
            paths::SESSIONS,
            r#"{"language":"python","env":{"1A":"x"}}"#,
            "env: the name \"1A\"",
        ),
        (
            paths::EXEC,
            r#"{"language":"python","code":"x","env":{"A":"x\u0000"}}"#,
            "contains NUL",
        ),
        (
            &exec,
            r#"{"code":"x","env":{"A-B":"x"}}"#,
            "letters, digits and '_'",
        ),
        (&exec, r#"{"code":"x","env":{"A":1}}"#, "invalid type"),
    ] {
        let (status, refused) = call(&api, request(Method::POST, path, body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert_eq!(executor.seen().len(), runs, "nothing ran");
}

#[tokio::test]
async fn parking_without_a_state_directory_is_refused_with_why_and_a_body_is_checked() {
    let (api, _) = api(echo_executor());
    let (_, info) = create(&api, r#"{"language":"python"}"#).await;
    let park = paths::session_park(info["id"].as_str().unwrap());
    for (body, needle) in [
        ("", "--state-dir"),
        ("{}", "--state-dir"),
        (r#"{"now": true}"#, "unknown field `now`"),
    ] {
        let (status, refused) = call(&api, request(Method::POST, &park, body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let (status, _) = call(&api, request(Method::GET, &park, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let gone = paths::session_park("0123");
    let (status, _) = call(&api, request(Method::POST, &gone, "")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_restart_is_an_exec_of_the_session_that_runs_no_program() {
    let (api, executor) = api(StubExecutor::new(|job| {
        Ok(ok_outcome("", serde_json::json!(job.fresh_interpreter)))
    }));
    let (_, info) = create(&api, r#"{"language":"javascript"}"#).await;
    let id = info["id"].as_str().unwrap().to_owned();
    let exec = paths::session_exec(&id);
    let (_, ran) = call(&api, request(Method::POST, &exec, r#"{"code":"x"}"#)).await;
    assert_eq!(ran["result"], false);
    let restart = paths::session_restart(&id);
    let (status, restarted) = call(&api, request(Method::POST, &restart, "")).await;
    assert_eq!(status, StatusCode::OK, "{restarted}");
    // The stub's sessions keep no state, so the restart's checkpoint is the session's own
    // (session::tests::lifecycle checks what a restart runs from).
    assert_eq!(
        restarted["execs"], 2,
        "an exec that runs no program: {restarted}"
    );
    let seen = executor.seen().clone();
    assert_eq!(seen.last().unwrap().1, "", "no program ran");
    let (status, refused) = call(&api, request(Method::POST, &restart, r#"{"x":1}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, _) = call(
        &api,
        request(Method::POST, &paths::session_restart("0123"), ""),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_install_without_an_index_says_how_to_allow_installs_and_changes_nothing() {
    let (api, _) = api(echo_executor());
    let (_, info) = create(&api, r#"{"language":"python"}"#).await;
    let id = info["id"].as_str().unwrap();
    let install = paths::session_packages(id);
    let (status, body) = call(
        &api,
        request(Method::POST, &install, r#"{"requirements":["m"]}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["kind"], "package_refused");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--package-index"), "{message}");
    let (status, body) = call(
        &api,
        request(Method::POST, &install, r#"{"requirements":[]}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, _) = call(&api, request(Method::POST, &install, r#"{"names":["m"]}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // A program's `%pip install` is refused the same way, and does not run.
    let exec = paths::session_exec(id);
    let code = r#"{"code":"%pip install m\nx = 1"}"#;
    let (status, body) = call(&api, request(Method::POST, &exec, code)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, read) = call(&api, request(Method::GET, &paths::session(id), "")).await;
    assert_eq!(read["execs"], 0, "{read}");
}
