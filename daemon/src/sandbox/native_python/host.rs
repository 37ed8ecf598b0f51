//! The host functions of a native Python sandbox: what the runner
//! (`guest/python-native/hyperlightd_native.py`) calls through hyperlight-unikraft. Each call
//! carries at most about 68 KB, so an event, a file, a display item and a reply too large for
//! one go in pieces, as base64.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hyperlight_unikraft::SandboxBuilder;
use serde::de::DeserializeOwned;

use crate::job::packages::Wheel;
use crate::job::workspace::Workspace;
use crate::job::{Display, Files, Stream};
use crate::sandbox::guest::OutputCapture;
use crate::sandbox::run_host::RunHost;

/// Bytes of a file, an event or a reply per call (60,000 characters of base64).
pub const PIECE: usize = 45_000;

/// A tool's answer or a response this long or shorter, in ASCII, is `tool_wait`'s or `fetch`'s
/// result; a longer one goes in pieces, as base64 (as the runner's own reply).
const INLINE_ANSWER: usize = 4096;

/// What a sandbox's host functions serve during one call.
#[derive(Debug)]
pub struct Host {
    pub output: Arc<OutputCapture>,
    /// The working directory: the request's files, then what the program wrote.
    pub work: Arc<Workspace>,
    /// The tool calls and outbound requests of the run in progress.
    pub run: RunHost,
    state: Mutex<CallState>,
}

#[derive(Debug, Default)]
struct CallState {
    /// The event's JSON text, when it is too large for the call.
    event: Vec<u8>,
    /// The request's files, in the order the event lists them.
    paths: Vec<String>,
    /// The wheels to install, in the order the event lists them.
    wheels: Vec<bytes::Bytes>,
    /// The reply's text so far, when it comes in pieces.
    reply: Vec<u8>,
    /// The display item being sent, so far.
    display: Vec<u8>,
    /// A tool call's arguments or a request, when they come in pieces.
    argument: Vec<u8>,
    /// A tool's answer or a response too large for one call, which the runner fetches in
    /// pieces.
    answer: Vec<u8>,
}

impl Host {
    pub fn new(output: Arc<OutputCapture>) -> Arc<Host> {
        Arc::new(Host {
            output,
            work: Arc::new(Workspace::default()),
            run: RunHost::default(),
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, CallState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call begins: `files` are the request's, `wheels` the ones it installs, `event` its
    /// event when it goes in pieces.
    pub fn begin(&self, files: &Files, wheels: &[Wheel], event: Vec<u8>) {
        *self.state() = CallState {
            event,
            paths: files.keys().cloned().collect(),
            wheels: wheels.iter().map(|w| w.bytes.clone()).collect(),
            ..CallState::default()
        };
    }

    /// The reply the runner sent in pieces, if it did.
    pub fn take_reply(&self) -> Vec<u8> {
        std::mem::take(&mut self.state().reply)
    }

    /// `builder` with this host's functions.
    pub fn register(self: &Arc<Self>, builder: SandboxBuilder) -> SandboxBuilder {
        let wheel = self.clone();
        let (write, event, file, put, remove, reply, display) = (
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
        );
        self.register_tools(builder)
            .host_function("write", move |args| {
                let (stream, text): (u8, String) = parse(args)?;
                let room = write.output.write(Stream::from_number(stream), &text);
                Ok(room.to_string())
            })
            .host_function("event", move |args| {
                let (index,): (usize,) = parse(args)?;
                let state = event.state();
                let start = index.saturating_mul(PIECE).min(state.event.len());
                let end = start.saturating_add(PIECE).min(state.event.len());
                Ok(base64_json(&state.event[start..end]))
            })
            .host_function("file", move |args| {
                let (index, offset): (usize, u64) = parse(args)?;
                let path = file.state().paths.get(index).cloned();
                let path = path.ok_or_else(|| format!("no file {index}"))?;
                let (bytes, _) = file
                    .work
                    .read(&path, offset, PIECE as u64)
                    .map_err(|e| e.to_string())?;
                Ok(base64_json(&bytes))
            })
            .host_function("wheel", move |args| {
                let (index, offset): (usize, usize) = parse(args)?;
                let state = wheel.state();
                let bytes = state
                    .wheels
                    .get(index)
                    .ok_or_else(|| format!("no wheel {index}"))?;
                let start = offset.min(bytes.len());
                let end = start.saturating_add(PIECE).min(bytes.len());
                Ok(base64_json(&bytes[start..end]))
            })
            .host_function("put", move |args| {
                let (path, offset, data, _last): (String, u64, String, bool) = parse(args)?;
                let bytes = BASE64.decode(data).map_err(|e| e.to_string())?;
                let written = match offset {
                    0 => put.work.put(&path, &bytes),
                    _ => put.work.write(&path, Some(offset), &bytes).map(drop),
                };
                Ok(match written {
                    Ok(()) => "null".to_owned(),
                    Err(refused) => serde_json::Value::String(refused.to_string()).to_string(),
                })
            })
            .host_function("remove", move |args| {
                let (path,): (String,) = parse(args)?;
                // A file the program removed is gone from the directory it leaves; one that
                // was never there has nothing to remove.
                let _ = remove.work.remove_file(&path);
                Ok("null".to_owned())
            })
            .host_function("display", move |args| {
                let (data, last): (String, bool) = parse(args)?;
                let bytes = BASE64.decode(data).map_err(|e| e.to_string())?;
                let item = {
                    let mut state = display.state();
                    if state.display.len() + bytes.len() > display.output.room() {
                        // Never held past the cap, however many pieces the guest sends.
                        state.display = Vec::new();
                        display.output.mark_truncated();
                        return Ok("false".to_owned());
                    }
                    state.display.extend_from_slice(&bytes);
                    if !last {
                        return Ok("true".to_owned());
                    }
                    std::mem::take(&mut state.display)
                };
                // `{"data": {MIME type: content}, "result": whether it is the last expression}`.
                let item: Display = serde_json::from_slice(&item)
                    .map_err(|e| format!("a display item is not data and a flag: {e}"))?;
                Ok(display.output.display(item).to_string())
            })
            .host_function("reply", move |args| {
                let (data,): (String,) = parse(args)?;
                let bytes = BASE64.decode(data).map_err(|e| e.to_string())?;
                reply.state().reply.extend_from_slice(&bytes);
                Ok("null".to_owned())
            })
    }
}

impl Host {
    /// The functions that reach out of the sandbox: `tool_call(name, arguments)`,
    /// `tool_wait(ms)` and `fetch(request)` (see [`RunHost`]). An argument too large for one
    /// call comes first in pieces through `argument_piece(base64)`, and is then given as null;
    /// an answer too large for one call is `{"pieces": n}`, fetched with `answer_piece(index)`.
    fn register_tools(self: &Arc<Self>, builder: SandboxBuilder) -> SandboxBuilder {
        let (piece, call, wait, fetch, answer) = (
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
            self.clone(),
        );
        builder
            .host_function("argument_piece", move |args| {
                let (data,): (String,) = parse(args)?;
                let bytes = BASE64.decode(data).map_err(|e| e.to_string())?;
                piece.state().argument.extend_from_slice(&bytes);
                Ok("null".to_owned())
            })
            .host_function("tool_call", move |args| {
                let (name, arguments): (String, Option<String>) = parse(args)?;
                let arguments = call.argument(arguments)?;
                Ok(call.run.call(&name, &arguments).to_string())
            })
            .host_function("tool_wait", move |args| {
                let (ms,): (f64,) = parse(args)?;
                Ok(wait.answer(wait.run.wait(ms).to_string()))
            })
            .host_function("fetch", move |args| {
                let (request,): (Option<String>,) = parse(args)?;
                let request = fetch.argument(request)?;
                Ok(fetch.answer(fetch.run.fetch(&request).to_string()))
            })
            .host_function("answer_piece", move |args| {
                let (index,): (usize,) = parse(args)?;
                let state = answer.state();
                let start = index.saturating_mul(PIECE).min(state.answer.len());
                let end = start.saturating_add(PIECE).min(state.answer.len());
                Ok(base64_json(&state.answer[start..end]))
            })
    }

    /// An argument given in the call, or (None) the one sent before it in pieces.
    fn argument(&self, given: Option<String>) -> Result<String, String> {
        match given {
            Some(given) => Ok(given),
            None => {
                let bytes = std::mem::take(&mut self.state().argument);
                String::from_utf8(bytes).map_err(|e| e.to_string())
            }
        }
    }

    /// `answer` as the call's result, or `{"pieces": n}` when it is too large for one.
    fn answer(&self, answer: String) -> String {
        if answer.len() <= INLINE_ANSWER && answer.is_ascii() {
            return answer;
        }
        let pieces = answer.len().div_ceil(PIECE);
        self.state().answer = answer.into_bytes();
        format!("{{\"pieces\": {pieces}}}")
    }
}

/// A host function's arguments (a JSON array).
fn parse<T: DeserializeOwned>(args: &str) -> Result<T, String> {
    serde_json::from_str(args).map_err(|e| format!("bad arguments: {e}"))
}

/// `bytes` in base64, as a JSON string.
fn base64_json(bytes: &[u8]) -> String {
    format!("\"{}\"", BASE64.encode(bytes))
}
