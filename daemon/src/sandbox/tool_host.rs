//! The guests' side of tool calls: what a runner's host functions `tool_call` and `tool_wait`
//! answer, the same for every guest. The exchange and the run's deadline are given at the start
//! of each run and taken away at its end, so a tool exists only for the exec that declared it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::job::Deadline;
use crate::job::tools::{ToolExchange, Waited};

/// The tool calls of the run in progress, shared by a sandbox's host functions.
#[derive(Debug, Default, Clone)]
pub struct ToolHost(Arc<Mutex<Option<Run>>>);

#[derive(Debug)]
struct Run {
    exchange: Arc<ToolExchange>,
    deadline: Arc<Deadline>,
}

impl ToolHost {
    fn run(&self) -> std::sync::MutexGuard<'_, Option<Run>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A run begins, with `tools` (or none) under `deadline`.
    pub fn begin(&self, tools: Option<&Arc<ToolExchange>>, deadline: &Arc<Deadline>) {
        *self.run() = tools.map(|exchange| Run {
            exchange: exchange.clone(),
            deadline: deadline.clone(),
        });
    }

    /// The run has ended: no tool is left to call.
    pub fn end(&self) {
        *self.run() = None;
    }

    fn current(&self) -> Option<(Arc<ToolExchange>, Arc<Deadline>)> {
        self.run()
            .as_ref()
            .map(|run| (run.exchange.clone(), run.deadline.clone()))
    }

    /// `tool_call(name, arguments)`: `{"id": ...}` once sent, or `{"error": ...}` for the
    /// program to raise (nothing was sent).
    pub fn call(&self, name: &str, arguments: &str) -> Value {
        let Some((exchange, _)) = self.current() else {
            return json!({"error": format!("there is no tool {name:?}: this execution declared no tools")});
        };
        match exchange.call(name, arguments) {
            Ok(id) => json!({"id": id}),
            Err(message) => json!({"error": message}),
        }
    }

    /// `tool_wait(ms)`: the next answer, `{"id", "result"}` (the result as JSON text) or
    /// `{"id", "error"}`; or `{"wait": "until"}` once `ms` milliseconds have passed (a negative
    /// `ms`: no bound), `"idle"` when no call is waiting, `"gone"` when the caller went away,
    /// `"wall_clock"` when the execution's wall-clock cap passed (the program is then stopped).
    pub fn wait(&self, ms: f64) -> Value {
        let Some((exchange, deadline)) = self.current() else {
            return json!({"wait": "idle"});
        };
        let until = (ms >= 0.0)
            .then(|| Duration::try_from_secs_f64(ms / 1000.0).ok())
            .flatten()
            .map(|wait| Instant::now() + wait);
        match exchange.wait(&deadline, until) {
            Waited::Answer {
                id,
                result: Ok(json),
            } => json!({"id": id, "result": json}),
            Waited::Answer {
                id,
                result: Err(message),
            } => json!({"id": id, "error": message}),
            Waited::Until => json!({"wait": "until"}),
            Waited::Idle => json!({"wait": "idle"}),
            Waited::Gone => json!({"wait": "gone"}),
            Waited::WallClock => {
                // Stopped as at its time limit: the watchdog interrupts it as it returns to
                // the guest, unless the runner ends the program first; either way the worker
                // answers with the cap, which the exchange remembers.
                deadline.expire();
                json!({"wait": "wall_clock"})
            }
        }
    }
}
