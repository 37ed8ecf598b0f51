//! The agent tool: hyperlightd as a function a model calls.
//!
//! [`CodeTool`] gives the tool's definition in the shapes model APIs take (OpenAI function
//! calling, Anthropic tool use; `hlctl mcp` serves the same one over the Model Context
//! Protocol), and runs a call from the model's raw argument string. Whatever happens (malformed
//! arguments, a failing program, a daemon that is down) the call returns a [`ToolResult`]: a
//! structured [`ToolOutput`] and a text rendering for the model that says what to do next. An
//! agent loop never has to special-case an `Err`.
//!
//! ```no_run
//! # async fn demo() {
//! use hyperlightd_client::Client;
//! use hyperlightd_client::tool::CodeTool;
//!
//! let tool = CodeTool::discover(Client::from_env()).await;
//! let definition = tool.openai_definition(); // put it in the request's `tools`
//! // ... the model answers with a call of `run_code` and its arguments as a string:
//! let result = tool.call(r#"{"language": "python", "code": "sum(range(10))"}"#).await;
//! println!("{}", result.text); // goes back to the model as the tool's answer
//! # }
//! ```

mod arguments;
mod render;
mod session;
mod signatures;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hyperlightd_api::{
    ErrorKind, ExecLimits, ExecRequest, ExecResponse, ExecStatus, Language, Runtime,
};
use serde::Serialize;
use serde_json::{Value, json};

pub use arguments::{Arguments, parse_arguments};

use crate::{Client, Error, Tools};

/// The tool's name, as the model sees it.
pub const TOOL_NAME: &str = "run_code";

/// How many characters of output (stdout, stderr and the result together) a rendering keeps
/// unless told otherwise: about 2,500 tokens, enough for a table or a traceback, not enough
/// to flood a context window.
pub const DEFAULT_OUTPUT_BUDGET: usize = 10_000;

/// The smallest output budget: room for a traceback's last lines and the marker.
pub const MIN_OUTPUT_BUDGET: usize = 200;

/// How long [`CodeTool::discover`] waits for the daemon's health.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);

/// What the tool knows of the daemon it calls: what the definition tells the model.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonFacts {
    /// The languages the daemon serves.
    pub languages: Vec<Language>,
    /// The limits executions run under; `None` when the daemon could not be asked.
    pub limits: Option<ExecLimits>,
    /// Packages each language offers beyond its standard library, name to version.
    pub packages: BTreeMap<Language, BTreeMap<String, String>>,
    /// What runs each language (for Python: native or WebAssembly, and its version).
    pub runtimes: BTreeMap<Language, Runtime>,
    /// The destinations programs may reach over HTTP (the daemon's egress rules); empty: none.
    pub egress_rules: Vec<String>,
    /// Whether Python programs may install packages (`%pip install`).
    pub installs: bool,
}

impl DaemonFacts {
    /// What can be said without asking the daemon: every language, limits unknown.
    pub fn unknown() -> DaemonFacts {
        DaemonFacts {
            languages: Language::ALL.to_vec(),
            limits: None,
            packages: BTreeMap::new(),
            runtimes: BTreeMap::new(),
            egress_rules: Vec::new(),
            installs: false,
        }
    }
}

/// The `run_code` tool, bound to one daemon.
#[derive(Debug, Clone)]
pub struct CodeTool {
    client: Client,
    facts: DaemonFacts,
    budget: usize,
    /// With sessions: the conversation's (see [`CodeTool::with_sessions`]).
    conversation: Option<Arc<session::Conversation>>,
    /// The functions the model's programs may call (see [`CodeTool::with_tools`]).
    tools: Tools,
}

/// What a call of the tool gives back.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The structured result (MCP's `structuredContent`; for a program that reads results).
    pub output: ToolOutput,
    /// The rendering for the model: the tool's answer in the conversation.
    pub text: String,
    /// Whether the call failed (the program failed or timed out, or nothing ran): MCP's
    /// `isError`, Anthropic's `is_error`.
    pub is_error: bool,
    /// The daemon's whole answer, when the program ran (the output in it is not cut).
    pub response: Option<ExecResponse>,
}

/// How a call of the tool ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The program ran to completion.
    Ok,
    /// The program failed (exception, syntax error, memory, sandbox failure).
    Error,
    /// The program ran past its time limit and was stopped.
    Timeout,
    /// The model's arguments were not a valid call; nothing ran.
    InvalidArguments,
    /// The daemon refused the request (busy, too large, ...); nothing ran.
    Rejected,
    /// The daemon could not be reached, or its answer was lost.
    Unavailable,
}

/// The structured result of a call: what the rendering says, as data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolOutput {
    /// How the call ended.
    pub status: ToolStatus,
    /// What the program printed, cut to the budget when over it.
    pub stdout: String,
    /// What the program wrote to stderr (tracebacks), cut to the budget when over it.
    pub stderr: String,
    /// The value of the program's last expression (JSON; a string when cut to the budget).
    pub result: Value,
    /// Why the call failed, and what to do about it.
    pub error: Option<ToolError>,
    /// The rich output the program showed (figures, tables), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub display: Vec<ToolDisplay>,
    /// Whether the daemon cut the output at its cap (the program ran on).
    pub truncated: bool,
    /// With sessions: the call timed out, ran out of memory or crashed, and the session is
    /// back where it was before it: nothing the call did is kept.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rolled_back: bool,
    /// With sessions: what the model must know about the session (it expired and was
    /// replaced, or there was no room for one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Whether this rendering cut output or result to the character budget.
    pub cut_to_budget: bool,
    /// How long the execution took, when it ran.
    pub duration_ms: Option<f64>,
}

/// One item of rich output, as the model is told of it: the image itself stays in the
/// response (`response.display`), for the application to show (`hlctl mcp` attaches it as an
/// MCP image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolDisplay {
    /// Its position in the response's `display` list.
    pub index: usize,
    /// The image's MIME type, when it is one (`image/png`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The image's size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<usize>,
    /// Its text form (a table's `text/plain`), cut to the budget when over it; none for an
    /// image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A failure and the advice a model needs to recover from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolError {
    /// The daemon's error kind (`timeout`, `exception`, `overloaded`, ...) or the tool's own:
    /// `invalid_arguments`, `unreachable`, `answer_lost`.
    pub kind: String,
    /// What happened.
    pub message: String,
    /// What to do about it.
    pub advice: String,
}

impl CodeTool {
    /// A tool for `client`'s daemon that describes what the daemon says of itself (languages,
    /// limits, packages). A daemon that cannot be asked gives a tool for every language that
    /// states no limits; calls then answer that the daemon is unreachable.
    pub async fn discover(client: Client) -> CodeTool {
        let asked = client
            .clone()
            .with_response_timeout(DISCOVERY_TIMEOUT)
            .health()
            .await;
        let facts = match asked {
            Ok(health) => DaemonFacts {
                languages: health.sandboxes.keys().copied().collect(),
                limits: Some(health.limits),
                packages: health.packages,
                runtimes: health.runtimes,
                egress_rules: health.egress.map(|e| e.rules).unwrap_or_default(),
                installs: health.installs.is_some(),
            },
            Err(_) => DaemonFacts::unknown(),
        };
        CodeTool::new(client, facts)
    }

    /// The same tool (its budget, its sessions) described by what the daemon says of itself
    /// now: for a long-lived tool whose daemon may have been restarted with other pools.
    pub async fn rediscover(&self) -> CodeTool {
        CodeTool {
            facts: CodeTool::discover(self.client.clone()).await.facts,
            ..self.clone()
        }
    }

    /// A tool for `client`'s daemon, described by `facts`.
    pub fn new(client: Client, facts: DaemonFacts) -> CodeTool {
        CodeTool {
            client,
            facts,
            budget: DEFAULT_OUTPUT_BUDGET,
            conversation: None,
            tools: Tools::new(),
        }
    }

    /// The same tool, keeping at most `characters` of output in a rendering; below
    /// [`MIN_OUTPUT_BUDGET`], that minimum.
    pub fn with_output_budget(self, characters: usize) -> CodeTool {
        CodeTool {
            budget: characters.max(MIN_OUTPUT_BUDGET),
            ..self
        }
    }

    /// The same tool, whose programs may call `tools` (answered by their handlers, in this
    /// process); its description then gives each one's signature in every language.
    pub fn with_tools(self, tools: Tools) -> CodeTool {
        CodeTool { tools, ..self }
    }

    /// The functions its programs may call.
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// What the tool knows of its daemon.
    pub fn facts(&self) -> &DaemonFacts {
        &self.facts
    }

    /// The description a model reads: what the tool does, the result convention, what the
    /// guests offer and lack, and the limits in force.
    pub fn description(&self) -> String {
        let mut text = render::description(&self.facts, self.keeps_state());
        if !self.tools.is_empty() {
            text.push_str(&signatures::section(
                &self.tools.specs(),
                &self.facts.languages,
            ));
        }
        text
    }

    /// The JSON Schema of the tool's arguments.
    pub fn input_schema(&self) -> Value {
        arguments::schema(&self.facts)
    }

    /// The definition for OpenAI function calling (Chat Completions' `tools` entries).
    pub fn openai_definition(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": self.description(),
                "parameters": self.input_schema(),
            }
        })
    }

    /// The definition for Anthropic tool use (the Messages API's `tools` entries).
    pub fn anthropic_definition(&self) -> Value {
        json!({
            "name": TOOL_NAME,
            "description": self.description(),
            "input_schema": self.input_schema(),
        })
    }

    /// Runs a call from the model's raw argument string (OpenAI's `arguments`).
    pub async fn call(&self, raw_arguments: &str) -> ToolResult {
        match parse_arguments(raw_arguments, &self.facts) {
            Ok(arguments) => self.run(arguments).await,
            Err(message) => self.invalid(message),
        }
    }

    /// Runs a call whose arguments arrived already parsed (Anthropic's `input`, MCP's
    /// `arguments`).
    pub async fn call_json(&self, arguments: &Value) -> ToolResult {
        match arguments::from_value(arguments, &self.facts) {
            Ok(arguments) => self.run(arguments).await,
            Err(message) => self.invalid(message),
        }
    }

    /// Runs validated arguments.
    pub async fn run(&self, arguments: Arguments) -> ToolResult {
        let request = ExecRequest {
            timeout_ms: arguments.timeout_ms,
            ..ExecRequest::new(arguments.language, arguments.code)
        };
        let timeout_ms = self.timeout_in_force(arguments.timeout_ms);
        let answer = match &self.conversation {
            Some(conversation) => self.exec_in_session(conversation, request).await,
            None => self.exec(&request).await.map(|r| (r, None)),
        };
        match answer {
            Ok((response, notice)) => self.ran(response, arguments.language, timeout_ms, notice),
            Err(error) => self.failed(&error),
        }
    }

    /// Runs `request`, answering its tool calls when the tool has tools.
    async fn exec(&self, request: &ExecRequest) -> Result<ExecResponse, Error> {
        if self.tools.is_empty() {
            self.client.exec(request).await
        } else {
            self.client.exec_with_tools(request, &self.tools).await
        }
    }

    /// The time limit a request asking for `requested` runs under, when the limits are known.
    fn timeout_in_force(&self, requested: Option<u64>) -> Option<u64> {
        let limits = self.facts.limits.as_ref()?;
        Some(
            requested
                .unwrap_or(limits.default_timeout_ms)
                .min(limits.max_timeout_ms),
        )
    }

    fn ran(
        &self,
        response: ExecResponse,
        language: Language,
        timeout_ms: Option<u64>,
        notice: Option<&str>,
    ) -> ToolResult {
        let status = match response.status {
            ExecStatus::Ok => ToolStatus::Ok,
            ExecStatus::Error => ToolStatus::Error,
            ExecStatus::Timeout => ToolStatus::Timeout,
        };
        let context = render::Context {
            facts: &self.facts,
            language: Some(language),
            timeout_ms,
        };
        let error = response.error.as_ref().map(|e| ToolError {
            kind: e.kind.as_str().to_owned(),
            message: e.message.clone(),
            advice: render::advice(e.kind, &context),
        });
        let cut = render::cut_to_budget(
            &response.stdout,
            &response.stderr,
            &response.result,
            self.budget,
        );
        let output = ToolOutput {
            status,
            stdout: cut.stdout,
            stderr: cut.stderr,
            result: cut.result,
            error,
            display: render::display(&response.display, self.budget),
            truncated: response.truncated,
            rolled_back: response.session.as_ref().is_some_and(|s| s.rolled_back),
            notice: notice.map(str::to_owned),
            cut_to_budget: cut.cut,
            duration_ms: Some(response.duration_ms),
        };
        self.finish(output, &context, Some(response))
    }

    fn failed(&self, error: &Error) -> ToolResult {
        let context = render::Context::nothing_ran(&self.facts);
        let (status, kind, message, advice) = match error {
            Error::Rejected { error: body, .. } => (
                ToolStatus::Rejected,
                body.kind.as_str(),
                body.message.clone(),
                render::advice(body.kind, &context),
            ),
            Error::Unreachable { .. } => (
                ToolStatus::Unavailable,
                "unreachable",
                error.to_string(),
                render::UNREACHABLE.to_owned(),
            ),
            Error::ConnectionLost { .. } | Error::TimedOut { .. } => (
                ToolStatus::Unavailable,
                "answer_lost",
                error.to_string(),
                render::ANSWER_LOST.to_owned(),
            ),
            Error::Protocol { .. } => (
                ToolStatus::Unavailable,
                "protocol",
                error.to_string(),
                render::advice(ErrorKind::Internal, &context),
            ),
        };
        let output = ToolOutput::nothing_ran(status, kind.to_owned(), message, advice);
        self.finish(output, &context, None)
    }

    fn invalid(&self, message: String) -> ToolResult {
        let advice = arguments::advice(&self.facts);
        let output = ToolOutput::nothing_ran(
            ToolStatus::InvalidArguments,
            "invalid_arguments".to_owned(),
            message,
            advice,
        );
        self.finish(output, &render::Context::nothing_ran(&self.facts), None)
    }

    fn finish(
        &self,
        output: ToolOutput,
        context: &render::Context<'_>,
        response: Option<ExecResponse>,
    ) -> ToolResult {
        ToolResult {
            text: render::text(&output, context),
            is_error: output.status != ToolStatus::Ok,
            output,
            response,
        }
    }
}

impl ToolOutput {
    fn nothing_ran(status: ToolStatus, kind: String, message: String, advice: String) -> Self {
        ToolOutput {
            status,
            stdout: String::new(),
            stderr: String::new(),
            result: Value::Null,
            display: Vec::new(),
            error: Some(ToolError {
                kind,
                message,
                advice,
            }),
            truncated: false,
            rolled_back: false,
            notice: None,
            cut_to_budget: false,
            duration_ms: None,
        }
    }
}

#[cfg(test)]
mod tests;
