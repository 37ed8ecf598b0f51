//! A complete agent tool loop, with a scripted model in place of a real one (no network).
//!
//! The loop is the one an agent runs with OpenAI's Chat Completions (Anthropic's Messages API
//! differs only in field names): send the conversation and the tool's definition, run each
//! tool call the model makes, append the tool's answer, and repeat until the model answers in
//! text. The scripted model first writes a program with a bug, reads the tool's answer, fixes
//! the program, and answers with the result.
//!
//! Run it against a daemon: `cargo run -p hyperlightd-client --example agent_loop` (the socket
//! from HYPERLIGHTD_SOCKET, else the default path). It prints the conversation as JSON lines and
//! exits 0 when the model's final answer holds the program's result.

use hyperlightd_client::Client;
use hyperlightd_client::tool::CodeTool;
use serde_json::{Value, json};

/// Stands in for a model: answers a conversation with the next assistant message.
struct ScriptedModel;

impl ScriptedModel {
    fn respond(&self, messages: &[Value], tools: &[Value]) -> Value {
        assert_eq!(
            tools[0]["function"]["name"], "run_code",
            "the tool is offered"
        );
        let last = messages.last().cloned().unwrap_or(Value::Null);
        let tool_call = |id: &str, code: &str| {
            let arguments = json!({ "language": "python", "code": code }).to_string();
            json!({
                "role": "assistant",
                "tool_calls": [{
                    "id": id,
                    "type": "function",
                    "function": { "name": "run_code", "arguments": arguments }
                }]
            })
        };
        match last["role"].as_str() {
            // First turn: a program that forgets an import.
            Some("user") => tool_call(
                "call_1",
                "data = [3, 1, 4, 1, 5, 9, 2, 6]\nstatistics.median(data)",
            ),
            // The tool said what went wrong and what to do: fix it and run again.
            Some("tool")
                if last["content"]
                    .as_str()
                    .is_some_and(|t| t.contains("NameError")) =>
            {
                tool_call(
                    "call_2",
                    "import statistics\ndata = [3, 1, 4, 1, 5, 9, 2, 6]\nstatistics.median(data)",
                )
            }
            // The program ran: answer with its result.
            Some("tool") => {
                let text = last["content"].as_str().unwrap_or_default();
                let result = text
                    .lines()
                    .find_map(|line| line.strip_prefix("result: "))
                    .unwrap_or("unknown");
                json!({ "role": "assistant", "content": format!("The median is {result}.") })
            }
            _ => json!({ "role": "assistant", "content": "I cannot help with that." }),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let tool = CodeTool::discover(Client::from_env()).await;
    let tools = vec![tool.openai_definition()];
    let model = ScriptedModel;
    let mut messages = vec![json!({
        "role": "user",
        "content": "What is the median of 3, 1, 4, 1, 5, 9, 2, 6?"
    })];
    println!("{}", messages[0]);
    for _turn in 0..5 {
        let reply = model.respond(&messages, &tools);
        println!("{reply}");
        messages.push(reply.clone());
        let Some(calls) = reply["tool_calls"].as_array() else {
            // A text answer ends the loop.
            let answer = reply["content"].as_str().unwrap_or_default();
            return if answer.contains("3.5") {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            };
        };
        for call in calls {
            let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
            let result = tool.call(arguments).await;
            let message = json!({
                "role": "tool",
                "tool_call_id": call["id"],
                "content": result.text,
            });
            println!("{message}");
            messages.push(message);
        }
    }
    std::process::ExitCode::FAILURE
}
