//! Tool calls from code: [`Tools`] holds the caller's handlers, and [`Client::exec_with_tools`]
//! runs the exchange (see `hyperlightd_api`'s `ToolSpec` and `ToolResult`): it declares the
//! tools, answers each call through its handler as the program makes it (several at once, in
//! the order they finish), and returns the final response.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::Method;
use hyperlightd_api::{
    ExecEvent, ExecRequest, ExecResponse, SessionExecRequest, ToolResult, ToolSpec, paths,
};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::{Client, DEFAULT_RESPONSE_TIMEOUT, Error, ExecStream, encode};

/// What a handler returns: the tool's result, or the message of its error (the program's
/// `ToolError` in Python, `Error` in JavaScript).
pub type ToolOutcome = Result<Value, String>;

type Handler =
    Arc<dyn Fn(Value) -> Pin<Box<dyn Future<Output = ToolOutcome> + Send>> + Send + Sync>;

/// The tools a program may call, each a declaration and the async function that answers it.
#[derive(Clone, Default)]
pub struct Tools {
    tools: BTreeMap<String, (ToolSpec, Handler)>,
}

impl fmt::Debug for Tools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl Tools {
    /// No tools.
    pub fn new() -> Self {
        Tools::default()
    }

    /// Adds tool `spec`, answered by `handler` with the call's arguments (which the schema
    /// accepted). A tool of the same name is replaced.
    pub fn with<F, Fut>(mut self, spec: ToolSpec, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolOutcome> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |arguments| Box::pin(handler(arguments)));
        self.tools.insert(spec.name.clone(), (spec, handler));
        self
    }

    /// The declarations, as a request's `tools`.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|(spec, _)| spec.clone()).collect()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The answer to call `id` of tool `name`: its handler's outcome.
    fn answer(
        &self,
        id: String,
        name: &str,
        arguments: Value,
    ) -> impl Future<Output = ToolResult> + use<> {
        let handler = self.tools.get(name).map(|(_, h)| Arc::clone(h));
        let name = name.to_owned();
        async move {
            let outcome = match handler {
                Some(handler) => handler(arguments).await,
                None => Err(format!("this client has no handler for tool {name:?}")),
            };
            match outcome {
                Ok(result) => ToolResult::ok(id, result),
                Err(message) => ToolResult::error(id, message),
            }
        }
    }
}

impl Client {
    /// Runs a program that may call `tools`, answering each call through its handler: the
    /// final response. The request's own `tools` are replaced by these. `Err` means the request
    /// did not run, or its stream broke (as for [`exec_stream`](Client::exec_stream)).
    pub async fn exec_with_tools(
        &self,
        request: &ExecRequest,
        tools: &Tools,
    ) -> Result<ExecResponse, Error> {
        let request = ExecRequest {
            tools: tools.specs(),
            ..request.clone()
        };
        let stream = self.exec_stream(&request).await?;
        self.relay(stream, tools).await
    }

    /// Runs a program in session `id` that may call `tools` (see
    /// [`exec_with_tools`](Client::exec_with_tools)).
    pub async fn session_exec_with_tools(
        &self,
        id: &str,
        request: &SessionExecRequest,
        tools: &Tools,
    ) -> Result<ExecResponse, Error> {
        let request = SessionExecRequest {
            tools: tools.specs(),
            ..request.clone()
        };
        let stream = self.session_exec_stream(id, &request).await?;
        self.relay(stream, tools).await
    }

    /// Answers one tool call of execution `execution_id` (its stream's `started` event), as
    /// its `tool_call` event named it. Only the caller that started the execution may;
    /// refused with `execution_not_found`, `execution_ended`, `tool_call_not_found` or
    /// `tool_call_answered` otherwise, and nothing changes.
    pub async fn answer_tool(&self, execution_id: &str, answer: &ToolResult) -> Result<(), Error> {
        let body = encode(answer)?;
        let path = paths::tool_results(execution_id);
        self.call(Method::POST, &path, body, DEFAULT_RESPONSE_TIMEOUT)
            .await
            .map(drop)
    }

    /// Reads `stream` to its response, answering its tool calls meanwhile. A handler runs as
    /// its own task; an answer the daemon refuses (the call timed out, the exec ended) is
    /// dropped: the program has already been told, and the response says how it ended.
    async fn relay(&self, mut stream: ExecStream, tools: &Tools) -> Result<ExecResponse, Error> {
        let mut execution = None;
        let mut answering = JoinSet::new();
        loop {
            tokio::select! {
                event = stream.next() => {
                    stream.restart_clock();
                    match event.unwrap_or_else(|| Err(lost(&stream)))? {
                        ExecEvent::Result(response) => return Ok(response),
                        ExecEvent::Error { error } => return Err(Error::Rejected {
                            status: 500,
                            error,
                            retry_after: None,
                        }),
                        ExecEvent::Started { execution_id } => execution = Some(execution_id),
                        ExecEvent::ToolCall { id, name, arguments } => {
                            let Some(execution) = execution.clone() else {
                                return Err(Error::Protocol {
                                    status: 200,
                                    message: "a tool call came before the execution's id".into(),
                                });
                            };
                            let (client, answer) = (self.clone(), tools.answer(id, &name, arguments));
                            answering.spawn(async move {
                                let _ = client.answer_tool(&execution, &answer.await).await;
                            });
                        }
                        ExecEvent::Stdout { .. } | ExecEvent::Stderr { .. } | ExecEvent::Display { .. } => {}
                    }
                }
                Some(_) = answering.join_next(), if !answering.is_empty() => stream.restart_clock(),
            }
        }
    }
}

fn lost(stream: &ExecStream) -> Error {
    stream.lost("the stream had already ended")
}
