//! A request's files at the API: checked and decoded for the executor, refused with a clear
//! kind when they are not paths the working directory allows or past its caps; the program's
//! files encoded in the response.

use hyper::{Method, StatusCode};
use hyperlightd_api::{ErrorKind, paths};

use super::{StubExecutor, api, call, ok_outcome, request};

/// An executor that gives back every file of the job with `!` appended.
fn files_echo() -> StubExecutor {
    StubExecutor::new(|job| {
        let mut outcome = ok_outcome("", serde_json::Value::Null);
        outcome.files = job
            .files
            .iter()
            .map(|(path, bytes)| (path.clone(), [bytes.as_slice(), b"!"].concat()))
            .collect();
        Ok(outcome)
    })
}

async fn exec(files: &str) -> (StatusCode, serde_json::Value) {
    let (api, _) = api(files_echo());
    let body = format!(r#"{{"language": "python", "code": "1", "files": {files}}}"#);
    call(&api, request(Method::POST, paths::EXEC, &body)).await
}

#[tokio::test]
async fn text_and_base64_go_in_and_come_back_as_text_where_they_can() {
    let (status, body) = exec(r#"{"in/a.txt": "hi", "b.bin": {"base64": "AP8="}}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["files"]["in/a.txt"], "hi!");
    assert_eq!(body["files"]["b.bin"]["base64"], "AP8h");
}

#[tokio::test]
async fn paths_that_leave_or_bend_the_working_directory_are_refused() {
    for path in [
        "../a",
        "/etc/passwd",
        "a/../b",
        "./a",
        "a//b",
        "a/",
        "",
        "a\\u0001b",
    ] {
        let (status, body) = exec(&format!(r#"{{"{path}": "x"}}"#)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path:?}: {body}");
        assert_eq!(body["error"]["kind"], ErrorKind::InvalidRequest.as_str());
        assert!(
            body["error"]["message"].as_str().unwrap().contains("files"),
            "{body}"
        );
    }
    let (status, body) = exec(r#"{"a": "x", "a/b": "y"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = exec(r#"{"a": {"base64": "@@"}}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("base64")
    );
    let (status, body) = exec(r#"{"a": 7}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn files_past_the_caps_are_refused_as_too_large() {
    // The tests' limits: 4 entries, 64 bytes.
    let (status, body) = exec(r#"{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}"#).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"]["kind"], ErrorKind::PayloadTooLarge.as_str());
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4 files")
    );
    let (status, body) = exec(r#"{"d1/d2/d3/d4/f": "x"}"#).await;
    assert_eq!(
        status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "directories count: {body}"
    );
    let big = "x".repeat(65);
    let (status, body) = exec(&format!(r#"{{"a": "{big}"}}"#)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("64 bytes")
    );
}

#[tokio::test]
async fn a_session_s_files_are_listed_and_fetched_by_path() {
    let (api, _) = api(files_echo());
    let body = r#"{"language": "python"}"#;
    let (status, created) = call(&api, request(Method::POST, paths::SESSIONS, body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap();
    let files = paths::session_files(id);
    let (status, list) = call(&api, request(Method::GET, &files, "")).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["files"], serde_json::json!([]));
    let (status, body) = call(
        &api,
        request(Method::GET, &format!("{files}/a%20b.txt"), ""),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["kind"], ErrorKind::NotFound.as_str());
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"a b.txt\"")
    );
    let (status, body) = call(
        &api,
        request(Method::GET, &paths::session_files("nope"), ""),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["kind"], ErrorKind::SessionNotFound.as_str());
    let (status, _) = call(&api, request(Method::PUT, &files, "")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_session_s_files_are_changed_all_or_none_and_bad_changes_are_refused() {
    let (api, executor) = api(files_echo());
    let body = r#"{"language": "python"}"#;
    let (_, created) = call(&api, request(Method::POST, paths::SESSIONS, body)).await;
    let id = created["id"].as_str().unwrap();
    let files = paths::session_files(id);
    let changes = r#"{"changes": [
        {"write": {"path": "in/a.txt", "data": "hi"}},
        {"write": {"path": "b.bin", "data": {"base64": "AP8="}}},
        {"move": {"from": "in/a.txt", "to": "a.txt"}},
        {"remove": {"path": "in"}}
    ]}"#;
    let (status, body) = call(&api, request(Method::POST, &files, changes)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["checkpoint"], 0, "the stub's runner keeps no state");
    // The change is an exec that runs nothing, over the changed files.
    let code = executor.seen().last().map(|seen| seen.1.clone());
    assert_eq!(code.as_deref(), Some(""));
    for (changes, status, kind, says) in [
        (
            r#"{"changes": [{"remove": {"path": "nope"}}]}"#,
            StatusCode::NOT_FOUND,
            ErrorKind::NotFound,
            "\"nope\": no such file",
        ),
        (
            r#"{"changes": [{"write": {"path": "../x", "data": ""}}]}"#,
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            "\"../x\" is not a path",
        ),
        (
            r#"{"changes": [{"move": {"from": "a", "to": "/etc/x"}}]}"#,
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            "\"/etc/x\" is not a path",
        ),
        (
            r#"{"changes": [{"write": {"path": "a", "data": {"base64": "@"}}}]}"#,
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            "base64",
        ),
        (
            r#"{"changes": [{"chmod": {"path": "a"}}]}"#,
            StatusCode::BAD_REQUEST,
            ErrorKind::InvalidRequest,
            "chmod",
        ),
        (
            r#"{"changes": [{"write": {"path": "big", "data": "65 bytes is more than the tests' cap of sixty-four bytes of files"}}]}"#,
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::PayloadTooLarge,
            "as many bytes",
        ),
    ] {
        let (got, body) = call(&api, request(Method::POST, &files, changes)).await;
        assert_eq!(got, status, "{changes}: {body}");
        assert_eq!(body["error"]["kind"], kind.as_str(), "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    let (status, body) = call(
        &api,
        request(
            Method::POST,
            &paths::session_files("nope"),
            r#"{"changes": []}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["kind"], ErrorKind::SessionNotFound.as_str());
}
