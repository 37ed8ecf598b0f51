//! The code interpreter's half of a sandbox: `/execute`, streamed as E2B's SDKs read it, and
//! contexts, each a session of the daemon's labelled with its sandbox.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper::{Method, Response, StatusCode};
use hyperlightd_api::{CreateSessionRequest, Language, Network, SessionExecRequest, SessionInfo};
use serde::Deserialize;
use serde_json::{Value, json};

use super::control::{self, CONTEXT_KIND};
use super::wire::{self, DEFAULT_CONTEXT, KIND, NETWORK, SANDBOX};
use super::{Body, Daemon, Events, Known, Refusal, empty};

/// The caller's sandbox `id`, as `known` has it, else as the daemon describes it.
pub async fn sandbox<D: Daemon>(
    daemon: &D,
    known: &Known,
    id: &str,
) -> Result<SessionInfo, Refusal> {
    if let Some(info) = known.get(id) {
        return Ok(info);
    }
    let info = control::sandbox(daemon, id).await?;
    known.insert(info.clone());
    Ok(info)
}

pub async fn route<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
    method: &Method,
    segments: &[&str],
    body: Bytes,
) -> Result<Response<Body>, Refusal> {
    match (method, segments) {
        (&Method::POST, ["execute"]) => execute(daemon, sandbox, &body).await,
        (&Method::POST, ["contexts"]) => {
            let context = new_context(daemon, sandbox, &body).await?;
            Ok(super::json(StatusCode::OK, &wire::context(&context)))
        }
        (&Method::GET, ["contexts"]) => {
            let mut contexts = vec![wire::context(sandbox)];
            contexts.extend(
                contexts_of(daemon, sandbox)
                    .await?
                    .iter()
                    .map(wire::context),
            );
            Ok(super::json(StatusCode::OK, &json!(contexts)))
        }
        (&Method::DELETE, ["contexts", id]) => {
            context(daemon, sandbox, id).await?;
            if *id == sandbox.id {
                return Err(Refusal::BadRequest(
                    "the sandbox's default context cannot be removed: kill the sandbox".to_owned(),
                ));
            }
            daemon.delete_session(id).await?;
            Ok(empty(StatusCode::NO_CONTENT))
        }
        (&Method::POST, ["contexts", id, "restart"]) => {
            // A fresh interpreter with the context's files kept: the daemon's restart.
            let context = context(daemon, sandbox, id).await?;
            daemon.restart_session(&context.id).await?;
            Ok(empty(StatusCode::NO_CONTENT))
        }
        (&Method::GET, ["health"]) => Ok(empty(StatusCode::OK)),
        _ => Err(Refusal::NotFound(format!(
            "{method} /{} is not part of the code interpreter this gateway serves",
            segments.join("/")
        ))),
    }
}

/// The body of `POST /execute`.
#[derive(Debug, Deserialize)]
struct Execute {
    code: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
}

/// `POST /execute`: the program in its context's session, its output streamed as E2B's lines.
async fn execute<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
    body: &Bytes,
) -> Result<Response<Body>, Refusal> {
    let execute: Execute = serde_json::from_slice(body)
        .map_err(|e| Refusal::BadRequest(format!("the execution's body: {e}")))?;
    let context = match (&execute.context_id, &execute.language) {
        (Some(_), Some(_)) => {
            return Err(Refusal::BadRequest(
                "give a context or a language, not both".to_owned(),
            ));
        }
        (Some(id), None) => context(daemon, sandbox, id).await?,
        (None, Some(name)) => default_context(daemon, sandbox, language(name)?).await?,
        (None, None) => sandbox.clone(),
    };
    let mut request = SessionExecRequest::new(execute.code);
    // This run's own, over the sandbox's (which its contexts have as their sessions' own).
    request.env = execute.env_vars.unwrap_or_default();
    // As long as the daemon lets a program run (it caps what is asked): the SDK's own
    // `timeout` ends a run sooner, by going away, which stops the program (below).
    request.timeout_ms = Some(u64::MAX);
    if sandbox.labels.get(NETWORK).map(String::as_str) == Some("none") {
        request.network = Some(Network { allow: Vec::new() });
    }
    let events = daemon.session_exec(&context.id, request).await?;
    // The body reads the daemon's events itself as hyper asks for more: each becomes E2B's
    // lines, and the last is followed at once by the body's end. When hyper drops the body (the
    // client went away, or gave up at its deadline), the events go with it, which stops the
    // program.
    let language = context.language;
    let lines = futures_util::stream::unfold(events, move |mut events| async move {
        loop {
            let lines_of = match events.next().await? {
                Ok(event) => wire::lines(event, language),
                Err(e) => vec![json!({"type": "error", "name": "GatewayError",
                    "value": e.to_string(), "traceback": ""})],
            };
            let mut text = String::new();
            for line in lines_of {
                text.push_str(&line.to_string());
                text.push('\n');
            }
            if !text.is_empty() {
                return Some((Ok(Frame::data(Bytes::from(text))), events));
            }
        }
    });
    let body = StreamBody::new(lines);
    let mut response = Response::new(body.boxed_unsync());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

fn language(name: &str) -> Result<Language, Refusal> {
    wire::language(name).ok_or_else(|| {
        Refusal::BadRequest(format!(
            "language {name:?} is not served: python and javascript (js) are"
        ))
    })
}

/// `POST /contexts`: a new session of the language asked for, labelled with the sandbox.
async fn new_context<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
    body: &Bytes,
) -> Result<SessionInfo, Refusal> {
    let body: BTreeMap<String, Value> = if body.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| Refusal::BadRequest(format!("the context's body: {e}")))?
    };
    if let Some(cwd) = body.get("cwd").and_then(Value::as_str)
        && cwd != "/home/user"
    {
        return Err(Refusal::Unsupported(format!(
            "cwd {cwd:?}: a context's working directory is /home/user, its files the session's"
        )));
    }
    let language = match body.get("language").and_then(Value::as_str) {
        Some(name) => language(name)?,
        None => Language::Python,
    };
    create_context(daemon, sandbox, language, None).await
}

/// A new context of `language` in `sandbox`: its default for the language if `default`.
async fn create_context<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
    language: Language,
    default: Option<&str>,
) -> Result<SessionInfo, Refusal> {
    let mut request = CreateSessionRequest::new(language)
        .with_label(KIND, CONTEXT_KIND)
        .with_label(SANDBOX, sandbox.id.clone());
    request.idle_timeout_s = Some(sandbox.idle_timeout_s);
    request.env = sandbox.env.clone();
    if let Some(network) = sandbox.labels.get(NETWORK) {
        request = request.with_label(NETWORK, network.clone());
    }
    if let Some(default) = default {
        request = request.with_label(DEFAULT_CONTEXT, default);
    }
    Ok(daemon.create_session(request).await?)
}

/// The sandbox's contexts besides its default one.
async fn contexts_of<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
) -> Result<Vec<SessionInfo>, Refusal> {
    let wanted = BTreeMap::from([(SANDBOX.to_owned(), sandbox.id.clone())]);
    Ok(daemon.sessions_labelled(&wanted).await?)
}

/// The context `id` of `sandbox` (the sandbox itself is its default context).
async fn context<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
    id: &str,
) -> Result<SessionInfo, Refusal> {
    if id == sandbox.id {
        return Ok(sandbox.clone());
    }
    contexts_of(daemon, sandbox)
        .await?
        .into_iter()
        .find(|context| context.id == id)
        .ok_or_else(|| Refusal::NotFound(format!("context {id:?} not found in this sandbox")))
}

/// The sandbox's default context for `language`: the sandbox itself for its own language,
/// otherwise one made on first use.
async fn default_context<D: Daemon>(
    daemon: &D,
    sandbox: &SessionInfo,
    language: Language,
) -> Result<SessionInfo, Refusal> {
    if language == sandbox.language {
        return Ok(sandbox.clone());
    }
    let name = language.to_string();
    let found = contexts_of(daemon, sandbox)
        .await?
        .into_iter()
        .find(|c| c.labels.get(DEFAULT_CONTEXT) == Some(&name));
    match found {
        Some(context) => Ok(context),
        None => create_context(daemon, sandbox, language, Some(&name)).await,
    }
}
