//! Tools a program may call: what a request declares, the limits granted, and the
//! exchange between the program, which calls a tool, and the caller, which answers.
//!
//! The program's side runs on its worker thread, inside a host function: [`ToolExchange::call`]
//! checks a call (a declared tool, arguments its schema accepts, within the limits) and sends
//! it to the caller among the program's output; [`ToolExchange::wait`] blocks until an answer
//! comes, a call runs out of time, or the caller goes away, with the program's clock stopped.
//! The caller's side is [`ToolExchange::answer`], from whatever transport carried the answer.
//! Nothing here knows of HTTP, of guests or of the wire's types.
//!
//! # Design: calls out of the sandbox
//! A program reaches nothing outside its micro-VM but the functions its exec declared. A call goes
//! from the guest to the host as one host function (`tool_call`: the tool's name and its arguments
//! as JSON; JavaScript's `hl.tool_call`, WebAssembly Python's `tool-call` in the WIT world,
//! native Python's through hyperlight-unikraft's host functions, in pieces when large), answered at
//! once with the call's id or the reason it was refused: unknown tool, arguments the schema rejects
//! (checked at the host with `jsonschema`, so every runtime gets the same message), too many calls,
//! too large. The call then goes to the caller as a `tool_call` event on the exec's stream. The
//! guest collects answers with `tool_wait`, which blocks the guest's thread until an answer (or a
//! call's timeout, or the wall-clock cap) and, while it blocks, stops the job's `Deadline`: the
//! watchdog, the pool's wait for the worker and the stuck-worker check all read the same deadline,
//! so a program waiting for its tools is neither interrupted nor counted as stuck. JavaScript keeps
//! its event loop: `tools.x()` returns a promise and the loop waits on `tool_wait` only when nothing
//! else can run, so `Promise.all` makes several calls outstanding at once; Python's calls block.
//!
//! Answers arrive as `POST /v1/executions/{id}/tool-results`. The service keeps a table of live
//! executions with tools (`service/executions.rs`): an id of 128 random bits, the owner's uid (an
//! answer from anyone else is `execution_not_found`, as if it did not exist), and the exchange
//! (`job/tools.rs`) that matches the answer to its call and wakes the guest. The exchange holds no
//! sandbox or lock of the pool: a tool wait holds only its own sandbox's worker. A wait looks
//! again every 50 ms at whether the caller's stream is still open; once it is closed the program
//! is stopped and the sandbox restored and free. When the exec ends the exchange is ended: later answers are
//! `execution_ended`, unanswered calls are counted, and the summary (outcomes, time waiting, names
//! called and how often) goes to the metrics and the audit line, never the arguments or results.
//!
//! Code mode puts one more hop in front: `hlctl mcp`'s handlers are `rmcp` calls to other MCP
//! servers (`hlctl/src/upstream.rs`), so an MCP host's `run_code` call becomes an exec whose tool
//! calls `hlctl` answers by calling those servers. The daemon sees an exec with tools like any
//! other; the transport never reaches the core.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::deadline::Deadline;
use super::{OutputChunk, OutputSink};
use crate::telemetry::{Attribute, Span, Trace};

/// A tool a request declared: its name (an identifier in both languages), what it does, and
/// the JSON Schema its arguments must satisfy.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
    /// `parameters`, compiled.
    pub validator: Arc<jsonschema::Validator>,
}

/// The daemon's bounds on a request's tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// How long one call may wait for its answer.
    pub call_timeout: Duration,
    /// Calls one exec may make.
    pub max_calls: u32,
    /// The most bytes of one call's arguments, or of one answer, as JSON.
    pub max_bytes: usize,
    /// How long the exec may last from its arrival, waits included.
    pub wall_clock: Duration,
}

/// A call the program made, as the caller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id, unique in its exec, which the answer names.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// What a call came back with: the tool's result (JSON text), or the error the program sees.
pub type ToolResult = Result<String, String>;

/// What [`ToolExchange::wait`] ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// A call's answer (a timed out call is answered with an error saying so).
    Answer { id: String, result: ToolResult },
    /// The instant the wait was bounded by came, with calls still waiting.
    Until,
    /// No call is waiting: there is nothing to wait for.
    Idle,
    /// The caller went away: nobody will answer.
    Gone,
    /// The exec's wall-clock cap has passed.
    WallClock,
}

/// Why an answer was not taken. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("no call {0:?} was made in this execution")]
    UnknownCall(String),
    #[error("call {0:?} was already answered (or ran out of time)")]
    AlreadyAnswered(String),
    #[error("the execution has ended")]
    Ended,
    /// Taken, but as an error for the program: the answer was larger than the limit.
    #[error("the answer is {bytes} bytes, over the limit of {limit} bytes (--max-tool-bytes)")]
    TooLarge { bytes: usize, limit: usize },
}

/// What a request's tool calls came to, for its audit line and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolSummary {
    /// Calls the caller was sent, by tool name.
    pub calls: BTreeMap<String, u32>,
    /// Calls by outcome: `ok`, `error` (the tool's error), `timeout`, `refused` (stopped in
    /// the exchange: unknown tool, bad arguments, a limit), `unanswered` (the exec ended first).
    pub outcomes: BTreeMap<&'static str, u32>,
    /// Time the program spent waiting for answers.
    pub waited: Duration,
}

/// The calls of one exec, and their answers.
#[derive(Debug)]
pub struct ToolExchange {
    tools: BTreeMap<String, Tool>,
    limits: ToolLimits,
    /// Where the calls go: the caller's stream.
    sink: OutputSink,
    /// When the exec's wall-clock cap passes.
    wall_clock: Instant,
    state: Mutex<State>,
    answered: Condvar,
}

#[derive(Debug, Default)]
struct State {
    made: u32,
    /// Calls sent and not answered, with when each runs out of time.
    pending: HashMap<String, Instant>,
    /// The spans of the calls not answered, which end with their answer.
    spans: HashMap<String, Span>,
    /// Answers the program has not taken yet, in the order they came.
    ready: Vec<(String, ToolResult)>,
    /// Ids of calls answered (or timed out).
    done: std::collections::HashSet<String>,
    ended: bool,
    /// A wait ended at the exec's wall-clock cap: the program is stopped, whatever it does next.
    capped: bool,
    summary: ToolSummary,
}

/// How long one wait blocks before it looks again at whether the caller is still there.
const LOOK_AGAIN: Duration = Duration::from_millis(50);

impl ToolExchange {
    /// The exchange of an exec that declared `tools`, arrived at `received`.
    pub fn new(tools: Vec<Tool>, limits: ToolLimits, sink: OutputSink, received: Instant) -> Self {
        ToolExchange {
            tools: tools.into_iter().map(|t| (t.name.clone(), t)).collect(),
            limits,
            sink,
            wall_clock: received + limits.wall_clock,
            state: Mutex::new(State::default()),
            answered: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tools declared, by name.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }

    /// The limits its calls are held to.
    pub fn limits(&self) -> ToolLimits {
        self.limits
    }

    /// Whether the exec's wall-clock cap has passed.
    pub fn past_wall_clock(&self) -> bool {
        Instant::now() >= self.wall_clock
    }

    /// Whether a wait of the program's ended at the wall-clock cap: the exec is then stopped
    /// at the cap, whether the watchdog interrupted the guest first or the guest returned.
    pub fn stopped_at_wall_clock(&self) -> bool {
        self.state().capped
    }

    /// The program calls `name` with `arguments` (JSON text): checked, then sent to the caller.
    /// Returns the call's id, or the error the program raises (nothing was sent).
    pub fn call(&self, name: &str, arguments: &str, trace: &Trace) -> Result<String, String> {
        let refused = |state: &mut State, message: String| {
            *state.summary.outcomes.entry("refused").or_default() += 1;
            Err(message)
        };
        let mut state = self.state();
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            return refused(
                &mut state,
                format!("there is no tool {name:?}; the tools are {known:?}"),
            );
        };
        if arguments.len() > self.limits.max_bytes {
            let message = format!(
                "the arguments are {} bytes as JSON, over the limit of {} bytes",
                arguments.len(),
                self.limits.max_bytes
            );
            return refused(&mut state, message);
        }
        if let Err(why) = check_arguments(tool, arguments) {
            return refused(&mut state, why);
        }
        if state.made >= self.limits.max_calls {
            let message = format!(
                "this execution has made its {} tool calls, the most one may make",
                self.limits.max_calls
            );
            return refused(&mut state, message);
        }
        if state.ended || self.sink.is_closed() {
            return refused(&mut state, "the caller has gone away".to_owned());
        }
        state.made += 1;
        let id = format!("call_{}", state.made);
        let call = ToolCall {
            id: id.clone(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        };
        if self.sink.send(OutputChunk::ToolCall(call)).is_err() {
            return refused(&mut state, "the caller has gone away".to_owned());
        }
        *state.summary.calls.entry(name.to_owned()).or_default() += 1;
        let due = Instant::now() + self.limits.call_timeout;
        state.pending.insert(id.clone(), due);
        let tool = name.to_owned();
        let span = trace.span(format!("execute_tool {name}"), || {
            vec![
                Attribute::new("gen_ai.operation.name", "execute_tool"),
                Attribute::new("gen_ai.tool.name", tool),
                Attribute::new("gen_ai.tool.call.id", id.clone()),
            ]
        });
        state.spans.insert(id.clone(), span);
        Ok(id)
    }

    /// Waits for the next answer to any of the program's calls, until `until` at the latest,
    /// with `deadline`'s clock stopped meanwhile (the caller's time is not the program's).
    pub fn wait(&self, deadline: &Arc<Deadline>, until: Option<Instant>) -> Waited {
        let started = Instant::now();
        let _paused = deadline.pause();
        let mut state = self.state();
        let waited = loop {
            if !state.ready.is_empty() {
                let (id, result) = state.ready.remove(0);
                break Waited::Answer { id, result };
            }
            let now = Instant::now();
            if let Some(id) = expired(&state.pending, now) {
                state.pending.remove(&id);
                if let Some(span) = state.spans.remove(&id) {
                    span.fail("timeout");
                }
                state.done.insert(id.clone());
                *state.summary.outcomes.entry("timeout").or_default() += 1;
                let ms = self.limits.call_timeout.as_millis();
                let result = Err(format!("the tool call got no answer within {ms} ms"));
                break Waited::Answer { id, result };
            }
            if state.pending.is_empty() {
                break Waited::Idle;
            }
            if self.sink.is_closed() {
                break Waited::Gone;
            }
            if now >= self.wall_clock {
                state.capped = true;
                break Waited::WallClock;
            }
            if until.is_some_and(|until| now >= until) {
                break Waited::Until;
            }
            let next = state.pending.values().copied().min().into_iter();
            let wake = next
                .chain(until)
                .chain([self.wall_clock, now + LOOK_AGAIN])
                .min()
                .unwrap_or(now);
            let (guard, _) = self
                .answered
                .wait_timeout(state, wake.saturating_duration_since(now))
                .unwrap_or_else(PoisonError::into_inner);
            state = guard;
        };
        state.summary.waited += started.elapsed();
        waited
    }

    /// The caller answers call `id`. An answer over the size limit is taken as an error for the
    /// program, and refused to the caller.
    pub fn answer(&self, id: &str, result: ToolResult) -> Result<(), AnswerError> {
        let mut state = self.state();
        if state.ended {
            return Err(AnswerError::Ended);
        }
        if state.done.contains(id) {
            return Err(AnswerError::AlreadyAnswered(id.to_owned()));
        }
        if state.pending.remove(id).is_none() {
            return Err(AnswerError::UnknownCall(id.to_owned()));
        }
        state.done.insert(id.to_owned());
        let bytes = match &result {
            Ok(json) | Err(json) => json.len(),
        };
        let limit = self.limits.max_bytes;
        let (result, outcome, refused) = if bytes > limit {
            let message =
                format!("the tool's answer was {bytes} bytes, over the limit of {limit} bytes");
            let too_large = AnswerError::TooLarge { bytes, limit };
            (Err(message), "too_large", Err(too_large))
        } else {
            let outcome = if result.is_ok() { "ok" } else { "error" };
            (result, outcome, Ok(()))
        };
        *state.summary.outcomes.entry(outcome).or_default() += 1;
        if let Some(span) = state.spans.remove(id)
            && outcome != "ok"
        {
            span.fail(outcome);
        }
        state.ready.push((id.to_owned(), result));
        self.answered.notify_all();
        refused
    }

    /// The exec has ended: later answers are refused, and calls still waiting counted as
    /// unanswered. Returns what its calls came to.
    pub fn end(&self) -> ToolSummary {
        let mut state = self.state();
        state.ended = true;
        let unanswered = u32::try_from(state.pending.len()).unwrap_or(u32::MAX);
        if unanswered > 0 {
            *state.summary.outcomes.entry("unanswered").or_default() += unanswered;
        }
        state.pending.clear();
        for (_, span) in state.spans.drain() {
            span.fail("unanswered");
        }
        self.answered.notify_all();
        state.summary.clone()
    }
}

/// The call that ran out of time first, if one has by `now`.
fn expired(pending: &HashMap<String, Instant>, now: Instant) -> Option<String> {
    pending
        .iter()
        .filter(|(_, due)| **due <= now)
        .min_by_key(|(_, due)| **due)
        .map(|(id, _)| id.clone())
}

/// Whether `arguments` (JSON text) is an object `tool`'s schema accepts; else why not, naming
/// the argument.
fn check_arguments(tool: &Tool, arguments: &str) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_str(arguments).map_err(|e| format!("the arguments are not JSON: {e}"))?;
    if !value.is_object() {
        return Err("the arguments must be an object of named arguments".to_owned());
    }
    let errors: Vec<String> = tool
        .validator
        .iter_errors(&value)
        .take(3)
        .map(|error| {
            let at = error.instance_path().to_string();
            if at.is_empty() {
                format!("{error}")
            } else {
                format!("argument {}: {error}", at.trim_start_matches('/'))
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
