//! Executions that declared tools, by id, while they run: where the caller's answers to their
//! calls go. An id is unguessable and belongs to the uid that started the exec: to anyone else
//! it does not exist. Ended executions are remembered for a while, so that a late answer is told
//! "ended", not "unknown".

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use crate::job::Principal;
use crate::job::tools::{AnswerError, ToolExchange, ToolResult};

/// How many ended executions are remembered.
const REMEMBERED: usize = 4096;

/// The executions with tools, live and lately ended.
#[derive(Debug, Default)]
pub struct Executions {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    live: HashMap<String, (Principal, Arc<ToolExchange>)>,
    ended: VecDeque<(String, Principal)>,
}

/// Why an answer was not taken. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerRefused {
    #[error("there is no execution {0:?} of this caller")]
    NotFound(String),
    #[error("execution {0:?} has ended: its calls take no more answers")]
    Ended(String),
    #[error(transparent)]
    Call(AnswerError),
}

/// A live execution's registration; dropping it ends the execution.
#[derive(Debug)]
pub struct Registered {
    id: String,
    owner: Principal,
    executions: Arc<Executions>,
}

impl Registered {
    /// The execution's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut state = self.executions.state();
        if let Some((_, exchange)) = state.live.remove(&self.id) {
            exchange.end();
        }
        if state.ended.len() == REMEMBERED {
            state.ended.pop_front();
        }
        state.ended.push_back((self.id.clone(), self.owner.clone()));
    }
}

impl Executions {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `owner`'s execution whose calls go through `exchange`, under a new id.
    pub fn register(self: &Arc<Self>, owner: Principal, exchange: Arc<ToolExchange>) -> Registered {
        let id = new_id();
        self.state()
            .live
            .insert(id.clone(), (owner.clone(), exchange));
        Registered {
            id,
            owner,
            executions: self.clone(),
        }
    }

    /// `caller`'s answer to call `call` of execution `id`.
    pub fn answer(
        &self,
        caller: &Principal,
        id: &str,
        call: &str,
        result: ToolResult,
    ) -> Result<(), AnswerRefused> {
        let exchange = {
            let state = self.state();
            match state.live.get(id) {
                Some((owner, exchange)) if owner == caller => exchange.clone(),
                Some(_) => return Err(AnswerRefused::NotFound(id.to_owned())),
                None if state.ended.contains(&(id.to_owned(), caller.clone())) => {
                    return Err(AnswerRefused::Ended(id.to_owned()));
                }
                None => return Err(AnswerRefused::NotFound(id.to_owned())),
            }
        };
        exchange.answer(call, result).map_err(|e| match e {
            AnswerError::Ended => AnswerRefused::Ended(id.to_owned()),
            other => AnswerRefused::Call(other),
        })
    }
}

/// 128 random bits, in hex: an id nobody can guess.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    // The system's entropy does not fail on Linux once booted; a failure leaves the bytes
    // zero, and the id is then made unique (not secret) by the time.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = nanos.to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("exec_{hex}")
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::job::tools::{Tool, ToolLimits};

    fn exchange() -> (
        Arc<ToolExchange>,
        tokio::sync::mpsc::UnboundedReceiver<crate::job::OutputChunk>,
    ) {
        let (sink, calls) = tokio::sync::mpsc::unbounded_channel();
        let schema = serde_json::json!({"type": "object"});
        let tool = Tool {
            name: "now".into(),
            description: String::new(),
            validator: Arc::new(jsonschema::validator_for(&schema).unwrap()),
            parameters: schema,
        };
        let limits = ToolLimits {
            call_timeout: Duration::from_secs(5),
            max_calls: 5,
            max_bytes: 100,
            wall_clock: Duration::from_secs(60),
        };
        let exchange = ToolExchange::new(vec![tool], limits, sink, Instant::now());
        (Arc::new(exchange), calls)
    }

    #[test]
    fn only_the_owner_answers_and_an_ended_execution_is_told_apart_from_an_unknown_one() {
        let executions = Arc::new(Executions::default());
        let (exchange, _calls) = exchange();
        let registered = executions.register(Principal::Uid(1000), exchange.clone());
        let id = registered.id().to_owned();
        assert!(id.starts_with("exec_") && id.len() == 37, "{id}");
        let call = exchange
            .call("now", "{}", &crate::telemetry::Trace::off())
            .unwrap();
        assert_eq!(
            executions.answer(&Principal::Uid(1001), &id, &call, Ok("1".into())),
            Err(AnswerRefused::NotFound(id.clone())),
            "another uid does not see it"
        );
        assert_eq!(
            executions.answer(&Principal::Uid(1000), "exec_0", &call, Ok("1".into())),
            Err(AnswerRefused::NotFound("exec_0".into()))
        );
        assert_eq!(
            executions.answer(&Principal::Uid(1000), &id, "call_7", Ok("1".into())),
            Err(AnswerRefused::Call(AnswerError::UnknownCall(
                "call_7".into()
            )))
        );
        executions
            .answer(&Principal::Uid(1000), &id, &call, Ok("1".into()))
            .unwrap();
        drop(registered);
        assert_eq!(
            executions.answer(&Principal::Uid(1000), &id, &call, Ok("1".into())),
            Err(AnswerRefused::Ended(id.clone()))
        );
        assert_eq!(
            executions.answer(&Principal::Uid(1001), &id, &call, Ok("1".into())),
            Err(AnswerRefused::NotFound(id)),
            "nor, once ended, to another uid"
        );
        let other = executions
            .register(Principal::Uid(1000), exchange)
            .id()
            .to_owned();
        assert_ne!(other, executions.state().ended[0].0, "ids differ");
    }
}
