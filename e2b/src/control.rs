//! E2B's control plane: sandboxes created, described, listed and killed, as the daemon's
//! sessions (see the module's design, [`super`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::{Method, Response, StatusCode};
use hyperlightd_api::{CreateSessionRequest, SessionInfo};
use serde_json::{Value, json};

use super::wire::{self, KIND, METADATA, NETWORK, SANDBOX, TEMPLATE};
use super::{Account, Body, Daemon, Refusal, empty};

/// What a sandbox's session is: the sandbox itself (its default context), or a context of one.
pub const SANDBOX_KIND: &str = "sandbox";
pub const CONTEXT_KIND: &str = "context";

/// `daemon` is `account`'s, for this request.
pub async fn route<D: Daemon>(
    daemon: &D,
    account: &Account<D>,
    method: &Method,
    segments: &[&str],
    query: &str,
    body: Bytes,
) -> Result<Response<Body>, Refusal> {
    let Account { key, known, .. } = account;
    let segments = match segments {
        ["v2", rest @ ..] => rest,
        rest => rest,
    };
    match (method, segments) {
        (&Method::POST, ["sandboxes"]) => {
            let info = create(daemon, &body).await?;
            known.insert(info.clone());
            Ok(super::json(StatusCode::CREATED, &wire::created(&info, key)))
        }
        (&Method::GET, ["sandboxes"]) => list(daemon, query).await,
        (&Method::GET, ["sandboxes", id]) => {
            let info = sandbox(daemon, id).await?;
            Ok(super::json(StatusCode::OK, &wire::detail(&info)))
        }
        (&Method::DELETE, ["sandboxes", id]) => {
            known.forget(id);
            kill(daemon, id).await
        }
        (&Method::POST, ["sandboxes", id, "connect" | "resume"]) => {
            known.forget(id);
            let (info, status) = connect(daemon, id, &body).await?;
            Ok(super::json(status, &wire::created(&info, key)))
        }
        (&Method::POST, ["sandboxes", id, "pause"]) => {
            known.forget(id);
            pause(daemon, id, &body).await
        }
        (&Method::POST, ["sandboxes", id, "timeout"]) => {
            // Its contexts take the sandbox's timeout: the next one made asks the daemon.
            known.forget(id);
            set_timeout(daemon, id, &body).await
        }
        (&Method::POST, ["sandboxes", _, "refreshes"]) => Err(Refusal::Unsupported(
            "refreshing a sandbox is not supported: set its timeout instead (set_timeout), or \
             use it: every run_code starts its timeout again"
                .to_owned(),
        )),
        _ => Err(Refusal::NotFound(format!(
            "{method} /{} is not part of the E2B API this gateway serves",
            segments.join("/")
        ))),
    }
}

/// `POST /sandboxes`: a session of the template's language, labelled as a sandbox.
async fn create<D: Daemon>(daemon: &D, body: &Bytes) -> Result<SessionInfo, Refusal> {
    let body: BTreeMap<String, Value> = serde_json::from_slice(body)
        .map_err(|e| Refusal::BadRequest(format!("the new sandbox's body: {e}")))?;
    let template = match body.get("templateID") {
        Some(Value::String(template)) => template.clone(),
        _ => return Err(Refusal::BadRequest("templateID is required".to_owned())),
    };
    let language = wire::template_language(&template).ok_or_else(|| {
        Refusal::NotFound(format!(
            "template {template:?} is not served: the templates are {}",
            wire::TEMPLATES
        ))
    })?;
    refuse_what_cannot_be_honoured(&body)?;
    let mut request = CreateSessionRequest::new(language)
        .with_label(KIND, SANDBOX_KIND)
        .with_label(TEMPLATE, template);
    // No internet: every program of the sandbox reaches nothing over HTTP, whatever the daemon
    // allows (the daemon's rules apply otherwise).
    let offline = ["allow_internet_access", "allowInternetAccess"]
        .iter()
        .any(|field| body.get(*field) == Some(&Value::Bool(false)));
    if offline {
        request = request.with_label(NETWORK, "none");
    }
    if let Some(timeout) = body.get("timeout").and_then(Value::as_u64) {
        request.idle_timeout_s = Some(timeout.max(1));
    }
    if let Some(metadata) = body.get("metadata").filter(|m| !is_empty(m)) {
        let Value::Object(fields) = metadata else {
            return Err(Refusal::BadRequest("metadata must be an object".to_owned()));
        };
        if fields.values().any(|v| !v.is_string()) {
            return Err(Refusal::BadRequest(
                "metadata's values must be strings".to_owned(),
            ));
        }
        request = request.with_label(METADATA, metadata.to_string());
    }
    if let Some(vars) = body.get("envVars").filter(|v| !is_empty(v)) {
        request.env = serde_json::from_value(vars.clone())
            .map_err(|_| Refusal::BadRequest("envVars must be an object of strings".to_owned()))?;
    }
    Ok(daemon.create_session(request).await?)
}

/// Fields of a new sandbox that ask for what hyperlightd does not do: refused rather than
/// accepted and ignored. Those left at their default are fine.
fn refuse_what_cannot_be_honoured(body: &BTreeMap<String, Value>) -> Result<(), Refusal> {
    const KNOWN: [&str; 7] = [
        "templateID",
        "timeout",
        "metadata",
        "envVars",
        "allow_internet_access",
        "allowInternetAccess",
        "secure",
    ];
    for (field, value) in body {
        if KNOWN.contains(&field.as_str()) || is_empty(value) {
            continue;
        }
        let why = match field.as_str() {
            "autoPause" | "autoResume" | "autoPauseMemory" => {
                "pausing is the daemon's (--state-dir parks idle sessions to disk), not asked per sandbox"
            }
            _ => "it is not supported by hyperlightd's E2B gateway",
        };
        return Err(Refusal::Unsupported(format!("{field}: {why}")));
    }
    Ok(())
}

/// Null, false, an empty string, list or object: what an SDK sends for "not asked".
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

/// `GET /v2/sandboxes`: the caller's sandboxes, filtered by `metadata` and `state` as asked.
async fn list<D: Daemon>(daemon: &D, query: &str) -> Result<Response<Body>, Refusal> {
    let mut metadata = BTreeMap::new();
    let mut states: Option<Vec<String>> = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "metadata" => metadata.extend(form_urlencoded::parse(value.as_bytes()).into_owned()),
            "state" => states = Some(value.split(',').map(str::to_owned).collect()),
            // Paging and ordering: every sandbox comes in one page, oldest first.
            _ => {}
        }
    }
    let wanted = BTreeMap::from([(KIND.to_owned(), SANDBOX_KIND.to_owned())]);
    let sessions = daemon.sessions_labelled(&wanted).await?;
    let listed: Vec<Value> = sessions
        .iter()
        .map(wire::detail)
        .filter(|detail| {
            metadata
                .iter()
                .all(|(k, v)| detail["metadata"][k].as_str() == Some(v.as_str()))
        })
        .filter(|detail| {
            states.as_ref().is_none_or(|states| {
                states
                    .iter()
                    .any(|s| detail["state"].as_str() == Some(s.as_str()))
            })
        })
        .collect();
    Ok(super::json(StatusCode::OK, &json!(listed)))
}

/// `DELETE /sandboxes/{id}`: its contexts' sessions, then its own.
async fn kill<D: Daemon>(daemon: &D, id: &str) -> Result<Response<Body>, Refusal> {
    sandbox(daemon, id).await?;
    let wanted = BTreeMap::from([(SANDBOX.to_owned(), id.to_owned())]);
    for context in daemon.sessions_labelled(&wanted).await? {
        daemon.delete_session(&context.id).await?;
    }
    daemon.delete_session(id).await?;
    Ok(empty(StatusCode::NO_CONTENT))
}

/// `POST /sandboxes/{id}/timeout`: the sandbox, and each of its contexts, expire once idle
/// `timeout` seconds from now (capped by the daemon's maximum).
async fn set_timeout<D: Daemon>(
    daemon: &D,
    id: &str,
    body: &Bytes,
) -> Result<Response<Body>, Refusal> {
    #[derive(serde::Deserialize)]
    struct Timeout {
        timeout: u64,
    }
    let asked: Timeout = serde_json::from_slice(body)
        .map_err(|e| Refusal::BadRequest(format!("the timeout's body: {e}")))?;
    sandbox(daemon, id).await?;
    set_timeouts(daemon, id, asked.timeout).await?;
    Ok(empty(StatusCode::NO_CONTENT))
}

/// Sandbox `id`'s sessions, its contexts' first.
async fn sessions_of<D: Daemon>(daemon: &D, id: &str) -> Result<Vec<String>, Refusal> {
    let wanted = BTreeMap::from([(SANDBOX.to_owned(), id.to_owned())]);
    let mut ids: Vec<String> = daemon
        .sessions_labelled(&wanted)
        .await?
        .into_iter()
        .map(|context| context.id)
        .collect();
    ids.push(id.to_owned());
    Ok(ids)
}

/// Sandbox `id` and its contexts expire once idle `seconds` from now.
async fn set_timeouts<D: Daemon>(daemon: &D, id: &str, seconds: u64) -> Result<(), Refusal> {
    for session in sessions_of(daemon, id).await? {
        daemon
            .set_session_idle_timeout(&session, seconds.max(1))
            .await?;
    }
    Ok(())
}

/// A body of the SDK's whose `memory: false` asks to drop the interpreters' state, which a
/// sandbox here never does: refused with why.
fn refuse_dropping_memory(body: &Bytes, what: &str) -> Result<Value, Refusal> {
    let asked: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| Refusal::BadRequest(format!("the {what}'s body: {e}")))?
    };
    if asked.get("memory") == Some(&Value::Bool(false)) {
        return Err(Refusal::Unsupported(format!(
            "memory=false (mode \"filesystem\") in a {what}: a sandbox here is paused and \
             resumed whole, its interpreters' state with its files"
        )));
    }
    Ok(asked)
}

/// `POST /sandboxes/{id}/pause`: each of the sandbox's sessions parked by the daemon (its
/// state written to `--state-dir` and out of memory) until the next use brings it back. 409
/// when it is paused already, as E2B answers; a daemon without a state directory refuses.
async fn pause<D: Daemon>(daemon: &D, id: &str, body: &Bytes) -> Result<Response<Body>, Refusal> {
    refuse_dropping_memory(body, "pause")?;
    if sandbox(daemon, id).await?.parked {
        return Err(Refusal::Conflict(format!(
            "sandbox {id:?} is paused already"
        )));
    }
    for session in sessions_of(daemon, id).await? {
        daemon.park_session(&session).await?;
    }
    Ok(empty(StatusCode::NO_CONTENT))
}

/// `POST /sandboxes/{id}/connect` (and the older `resume`): the sandbox, 201 if it was paused
/// (its state comes back from disk with its next use), 200 if it ran; `timeout` sets its
/// timeout as `set_timeout` does.
async fn connect<D: Daemon>(
    daemon: &D,
    id: &str,
    body: &Bytes,
) -> Result<(SessionInfo, StatusCode), Refusal> {
    let asked = refuse_dropping_memory(body, "connect")?;
    let info = sandbox(daemon, id).await?;
    if let Some(timeout) = asked.get("timeout").filter(|t| !t.is_null()) {
        let seconds = timeout
            .as_u64()
            .ok_or_else(|| Refusal::BadRequest("timeout must be a number of seconds".to_owned()))?;
        set_timeouts(daemon, id, seconds).await?;
    }
    let status = if info.parked {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((info, status))
}

/// The caller's sandbox `id`: its default session. 404 for any other id, a context's included.
pub async fn sandbox<D: Daemon>(daemon: &D, id: &str) -> Result<SessionInfo, Refusal> {
    let not_found = || Refusal::NotFound(format!("sandbox {id:?} not found"));
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(not_found());
    }
    match daemon.session(id).await {
        Ok(info) if info.labels.get(KIND).map(String::as_str) == Some(SANDBOX_KIND) => Ok(info),
        Ok(_) => Err(not_found()),
        Err(e) if super::daemon_status(&e) == StatusCode::NOT_FOUND => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cannot_be_honoured_is_refused_and_defaults_pass() {
        let body = |v: Value| -> BTreeMap<String, Value> { serde_json::from_value(v).unwrap() };
        let fine = body(json!({"templateID": "code-interpreter-v1", "timeout": 300,
            "autoPause": false, "envVars": {}, "metadata": {"a": "b"}, "secure": true,
            "allow_internet_access": true}));
        assert!(refuse_what_cannot_be_honoured(&fine).is_ok());
        let mut with_env = fine.clone();
        with_env.insert("envVars".to_owned(), json!({"A": "1"}));
        assert!(refuse_what_cannot_be_honoured(&with_env).is_ok());
        for (field, value) in [
            ("autoPause", json!(true)),
            ("network", json!({"allowOut": ["x"]})),
        ] {
            let mut asked = fine.clone();
            asked.insert(field.to_owned(), value);
            let refused = refuse_what_cannot_be_honoured(&asked);
            assert!(matches!(refused, Err(Refusal::Unsupported(ref m)) if m.starts_with(field)));
        }
    }
}
