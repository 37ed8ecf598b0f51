use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::*;
use crate::job::{Deadline, OutputChunk};

fn tool(name: &str, parameters: serde_json::Value) -> Tool {
    Tool {
        name: name.to_owned(),
        description: String::new(),
        validator: Arc::new(jsonschema::validator_for(&parameters).unwrap()),
        parameters,
    }
}

const LIMITS: ToolLimits = ToolLimits {
    call_timeout: Duration::from_secs(5),
    max_calls: 3,
    max_bytes: 100,
    wall_clock: Duration::from_secs(60),
};

fn exchange(limits: ToolLimits) -> (Arc<ToolExchange>, UnboundedReceiver<OutputChunk>) {
    let (sink, calls) = unbounded_channel();
    let weather = tool(
        "get_weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    );
    let tools = vec![weather, tool("now", json!({"type": "object"}))];
    let exchange = ToolExchange::new(tools, limits, sink, Instant::now());
    (Arc::new(exchange), calls)
}

fn deadline() -> Arc<Deadline> {
    Deadline::new(Instant::now() + Duration::from_secs(60))
}

#[test]
fn a_call_goes_to_the_caller_and_its_answer_back_to_the_program() {
    let (exchange, mut calls) = exchange(LIMITS);
    let id = exchange
        .call("get_weather", r#"{"city": "Paris"}"#, &Trace::off())
        .unwrap();
    let Ok(OutputChunk::ToolCall(call)) = calls.try_recv() else {
        panic!("the call is sent");
    };
    assert_eq!(
        call,
        ToolCall {
            id: id.clone(),
            name: "get_weather".into(),
            arguments: r#"{"city": "Paris"}"#.into()
        }
    );
    let answering = exchange.clone();
    let answered = id.clone();
    let answerer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        answering.answer(&answered, Ok("21".into()))
    });
    let deadline = deadline();
    let before = deadline.at();
    let waited = exchange.wait(&deadline, None);
    assert_eq!(
        waited,
        Waited::Answer {
            id: id.clone(),
            result: Ok("21".into())
        }
    );
    answerer.join().unwrap().unwrap();
    assert!(
        deadline.at() > before,
        "the program's clock stood still while it waited"
    );
    assert_eq!(exchange.wait(&deadline, None), Waited::Idle);
    // A second answer, an unknown call, and any answer once the exec ended change nothing.
    assert_eq!(
        exchange.answer(&id, Ok("1".into())),
        Err(AnswerError::AlreadyAnswered(id.clone()))
    );
    assert_eq!(
        exchange.answer("call_9", Ok("1".into())),
        Err(AnswerError::UnknownCall("call_9".into()))
    );
    let summary = exchange.end();
    assert_eq!(summary.calls, [("get_weather".to_owned(), 1)].into());
    assert_eq!(summary.outcomes, [("ok", 1)].into());
    assert_eq!(
        exchange.answer(&id, Ok("1".into())),
        Err(AnswerError::Ended)
    );
}

#[test]
fn a_bad_call_fails_in_the_program_and_never_reaches_the_caller() {
    let (exchange, mut calls) = exchange(LIMITS);
    let refused =
        |name: &str, arguments: &str| exchange.call(name, arguments, &Trace::off()).unwrap_err();
    assert!(refused("get_wether", "{}").contains("no tool \"get_wether\""));
    let missing = refused("get_weather", "{}");
    assert!(missing.contains("city"), "{missing}");
    let wrong = refused("get_weather", r#"{"city": 3}"#);
    assert!(wrong.contains("argument city"), "{wrong}");
    assert!(refused("now", "[1]").contains("object"));
    let long = format!(r#"{{"city": "{}"}}"#, "x".repeat(200));
    assert!(refused("get_weather", &long).contains("over the limit of 100 bytes"));
    assert!(calls.try_recv().is_err(), "nothing was sent");
    assert_eq!(exchange.end().outcomes, [("refused", 5)].into());
}

#[test]
fn calls_past_the_limit_are_refused() {
    let (exchange, _calls) = exchange(LIMITS);
    for _ in 0..3 {
        exchange.call("now", "{}", &Trace::off()).unwrap();
    }
    let over = exchange.call("now", "{}", &Trace::off()).unwrap_err();
    assert!(over.contains("its 3 tool calls"), "{over}");
}

#[test]
fn answers_come_in_any_order_and_a_large_one_is_an_error_for_the_program() {
    let (exchange, _calls) = exchange(LIMITS);
    let first = exchange.call("now", "{}", &Trace::off()).unwrap();
    let second = exchange.call("now", "{}", &Trace::off()).unwrap();
    exchange.answer(&second, Err("no clock".into())).unwrap();
    let large = format!("\"{}\"", "x".repeat(200));
    assert_eq!(
        exchange.answer(&first, Ok(large)),
        Err(AnswerError::TooLarge {
            bytes: 202,
            limit: 100
        })
    );
    let deadline = deadline();
    assert_eq!(
        exchange.wait(&deadline, None),
        Waited::Answer {
            id: second,
            result: Err("no clock".into())
        }
    );
    let Waited::Answer { id, result } = exchange.wait(&deadline, None) else {
        panic!("the first call's answer");
    };
    assert_eq!(id, first);
    assert!(result.unwrap_err().contains("202 bytes"));
}

#[test]
fn a_call_without_an_answer_times_out_and_a_late_answer_is_refused() {
    let limits = ToolLimits {
        call_timeout: Duration::from_millis(30),
        ..LIMITS
    };
    let (exchange, _calls) = exchange(limits);
    let id = exchange.call("now", "{}", &Trace::off()).unwrap();
    let Waited::Answer {
        id: timed_out,
        result,
    } = exchange.wait(&deadline(), None)
    else {
        panic!("an answer");
    };
    assert_eq!(timed_out, id);
    assert!(result.unwrap_err().contains("no answer within 30 ms"));
    assert_eq!(
        exchange.answer(&id, Ok("1".into())),
        Err(AnswerError::AlreadyAnswered(id))
    );
    assert_eq!(exchange.end().outcomes, [("timeout", 1)].into());
}

#[test]
fn a_wait_ends_at_its_bound_when_the_caller_goes_and_at_the_wall_clock_cap() {
    let (exchange, calls) = exchange(LIMITS);
    exchange.call("now", "{}", &Trace::off()).unwrap();
    let until = Instant::now() + Duration::from_millis(20);
    assert_eq!(exchange.wait(&deadline(), Some(until)), Waited::Until);
    drop(calls);
    assert_eq!(exchange.wait(&deadline(), None), Waited::Gone);
    assert!(
        !exchange.stopped_at_wall_clock(),
        "only the cap stops it so"
    );
    assert!(
        exchange.call("now", "{}", &Trace::off()).is_err(),
        "nobody to send it to"
    );
    assert_eq!(
        exchange.end().outcomes,
        [("refused", 1), ("unanswered", 1)].into()
    );

    let capped = ToolLimits {
        wall_clock: Duration::from_millis(30),
        ..LIMITS
    };
    let (exchange, _calls) = super::tests::exchange(capped);
    exchange.call("now", "{}", &Trace::off()).unwrap();
    assert!(!exchange.stopped_at_wall_clock());
    assert_eq!(exchange.wait(&deadline(), None), Waited::WallClock);
    assert!(
        exchange.stopped_at_wall_clock(),
        "the exec is stopped at the cap"
    );
}

mod fuzz {
    //! What a program sends a tool call with, and a caller answers it with, fuzzed
    //! (`PROPTEST_CASES` sets the cases): any call is sent or refused, and any answer taken or
    //! refused, without a panic.

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn any_call_and_answer_are_taken_or_refused(
            name in prop_oneof![Just("get_weather".to_owned()), Just("now".to_owned()), any::<String>()],
            arguments in prop_oneof![
                "\\{\"city\": ?(\"[ -~]{0,8}\"|[0-9]{1,3}|null|\\[\\])\\}",
                any::<String>(),
            ],
            id in prop_oneof![Just(None), any::<String>().prop_map(Some)],
            result in any::<Result<String, String>>(),
        ) {
            let (exchange, _calls) = exchange(LIMITS);
            let called = exchange.call(&name, &arguments, &Trace::off());
            let id = id.or(called.ok()).unwrap_or_default();
            let _ = exchange.answer(&id, result);
            let _ = exchange.end();
        }
    }
}
