#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use hyperlightd_api::{DisplayData, ErrorBody, ExecLimits};
use serde_json::json;

use super::*;

fn facts() -> DaemonFacts {
    DaemonFacts {
        languages: vec![Language::Javascript, Language::Python],
        limits: Some(ExecLimits {
            default_timeout_ms: 5_000,
            max_timeout_ms: 60_000,
            max_code_bytes: 512 * 1024,
            max_output_bytes: 1024 * 1024,
            max_result_bytes: 1024 * 1024,
            memory_mib: BTreeMap::from([(Language::Javascript, 64), (Language::Python, 128)]),
            max_files: 256,
            max_file_bytes: 8 << 20,
        }),
        packages: BTreeMap::from([(
            Language::Python,
            BTreeMap::from([("networkx".to_owned(), "3.5".to_owned())]),
        )]),
        runtimes: BTreeMap::from([(
            Language::Python,
            Runtime {
                name: "webassembly".to_owned(),
                version: Some("3.14".to_owned()),
            },
        )]),
        egress_rules: Vec::new(),
        installs: false,
    }
}

/// A tool whose daemon is not there: calls that pass validation answer `unreachable`.
fn tool() -> CodeTool {
    let dir = std::env::temp_dir().join("hyperlightd-tool-test-no-daemon.sock");
    CodeTool::new(Client::connect(dir), facts())
}

fn response(status: ExecStatus, kind: Option<ErrorKind>, stdout: &str) -> ExecResponse {
    ExecResponse {
        status,
        stdout: stdout.to_owned(),
        stderr: String::new(),
        truncated: false,
        result: Value::Null,
        error: kind.map(|k| ErrorBody::new(k, format!("{k} happened"))),
        duration_ms: 12.5,
        queued_ms: 0.5,
        session: None,
        files: Default::default(),
        display: Vec::new(),
    }
}

fn rendered(status: ExecStatus, kind: Option<ErrorKind>) -> ToolResult {
    tool().ran(
        response(status, kind, "partial\n"),
        Language::Python,
        Some(5_000),
        None,
    )
}

// The published shapes, as the providers' API references define them: OpenAI's
// `ChatCompletionTool` (type "function", and a `FunctionObject`: a name of 1 to 64 of a-z A-Z
// 0-9 _ -, a description, `parameters` a JSON Schema object) and Anthropic's `Tool` (`name`,
// `description`, `input_schema` an object schema with "type": "object").
fn openai_tool_schema() -> Value {
    json!({
        "type": "object",
        "required": ["type", "function"],
        "additionalProperties": false,
        "properties": {
            "type": { "const": "function" },
            "function": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": false,
                "properties": {
                    "name": { "type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$" },
                    "description": { "type": "string" },
                    "parameters": { "type": "object" },
                    "strict": { "type": ["boolean", "null"] }
                }
            }
        }
    })
}

fn anthropic_tool_schema() -> Value {
    json!({
        "type": "object",
        "required": ["name", "input_schema"],
        "additionalProperties": false,
        "properties": {
            "name": { "type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$" },
            "description": { "type": "string" },
            "input_schema": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": { "const": "object" },
                    "properties": { "type": ["object", "null"] },
                    "required": { "type": ["array", "null"], "items": { "type": "string" } }
                }
            }
        }
    })
}

fn assert_valid(schema: &Value, instance: &Value) {
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?} in {instance:#}");
}

#[test]
fn definitions_have_the_published_shapes() {
    let tool = tool();
    assert_valid(&openai_tool_schema(), &tool.openai_definition());
    assert_valid(&anthropic_tool_schema(), &tool.anthropic_definition());
    let parameters = tool.input_schema();
    assert!(
        jsonschema::meta::is_valid(&parameters),
        "the parameters are a valid JSON Schema"
    );
    assert_eq!(
        parameters["properties"]["language"]["enum"],
        json!(["javascript", "python"])
    );
    assert_eq!(parameters["required"], json!(["language", "code"]));
    assert_eq!(parameters["properties"]["timeout_ms"]["maximum"], 60_000);
}

#[test]
fn the_languages_are_the_daemons() {
    let facts = DaemonFacts {
        languages: vec![Language::Python],
        ..facts()
    };
    let tool = CodeTool::new(Client::connect("/nonexistent"), facts);
    assert_eq!(
        tool.input_schema()["properties"]["language"]["enum"],
        json!(["python"])
    );
    assert!(!tool.description().contains("QuickJS"));
}

#[test]
fn the_description_tells_a_model_what_it_needs() {
    let text = tool().description();
    for needed in [
        "last expression",
        "`result`",
        "no network",
        "no host filesystem",
        "clean interpreter",
        "standard library",
        "networkx 3.5",
        "5 s per run",
        "at most 60 s",
        "128 MiB (python)",
        "64 MiB (javascript)",
        "output 1024 KiB",
    ] {
        assert!(text.contains(needed), "{needed:?} not in {text}");
    }
    let unknown = CodeTool::new(Client::connect("/x"), DaemonFacts::unknown()).description();
    assert!(!unknown.contains("Limits:"), "{unknown}");
}

#[test]
fn a_figure_is_named_and_a_table_shown_as_text() {
    let mut answer = response(ExecStatus::Ok, None, "");
    let item = |pairs: &[(&str, &str)]| DisplayData {
        data: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        result: false,
    };
    answer.display = vec![
        item(&[("image/png", &"A".repeat(4096)), ("text/plain", "<Figure>")]),
        item(&[("text/html", "<table/>"), ("text/plain", "   a\n0  1")]),
    ];
    let result = tool().ran(answer, Language::Python, None, None);
    assert!(
        result
            .text
            .contains("display 1: a figure was produced (image/png, 3 KiB)"),
        "{}",
        result.text
    );
    assert!(
        result.text.contains("display 2:\n   a\n0  1"),
        "{}",
        result.text
    );
    assert!(!result.text.contains("<Figure>") && !result.text.contains("AAAA"));
    let output = serde_json::to_value(&result.output).unwrap();
    assert_eq!(output["display"][0]["image"], "image/png");
    assert_eq!(output["display"][1]["text"], "   a\n0  1");
}

#[test]
fn the_description_names_the_python_runtime_and_its_version() {
    let wasm = tool().description();
    assert!(
        wasm.contains("CPython 3.14 compiled to WebAssembly"),
        "{wasm}"
    );
    let native = DaemonFacts {
        runtimes: BTreeMap::from([(
            Language::Python,
            Runtime {
                name: "native".to_owned(),
                version: Some("3.11.2".to_owned()),
            },
        )]),
        packages: BTreeMap::from([(
            Language::Python,
            BTreeMap::from([
                ("numpy".to_owned(), "2.4.6".to_owned()),
                ("pandas".to_owned(), "3.1.1".to_owned()),
            ]),
        )]),
        ..facts()
    };
    let text = CodeTool::new(Client::connect("/x"), native).description();
    assert!(
        text.contains("CPython 3.11.2 (a native Linux build)"),
        "{text}"
    );
    assert!(
        text.contains("packages: numpy 2.4.6, pandas 3.1.1"),
        "{text}"
    );
    assert!(
        !text.contains("WebAssembly") && !text.contains("absent: ctypes"),
        "{text}"
    );
}

#[test]
fn valid_arguments_parse() {
    let facts = facts();
    let parsed = parse_arguments(
        r#"{"language":"python","code":"1+1","timeout_ms":2000}"#,
        &facts,
    )
    .unwrap();
    assert_eq!(
        parsed,
        Arguments {
            language: Language::Python,
            code: "1+1".into(),
            timeout_ms: Some(2000)
        }
    );
    // Aliases, a whole number written as a float, null for "left out", encoded twice.
    let lenient = parse_arguments(
        r#"{"language":"JS","code":"1","timeout_ms":5000.0}"#,
        &facts,
    );
    assert_eq!(lenient.unwrap().timeout_ms, Some(5000));
    let null = parse_arguments(r#"{"language":"py","code":"1","timeout_ms":null}"#, &facts);
    assert_eq!(null.unwrap().timeout_ms, None);
    let twice = parse_arguments(r#""{\"language\":\"python\",\"code\":\"2\"}""#, &facts);
    assert_eq!(twice.unwrap().code, "2");
}

#[test]
fn invalid_arguments_say_what_is_wrong() {
    let facts = DaemonFacts {
        languages: vec![Language::Javascript],
        ..facts()
    };
    for (raw, expected) in [
        ("", "empty"),
        ("{\"language\": \"javascript\", ", "not valid JSON"),
        ("[1, 2]", "an array, not a JSON object"),
        (
            r#"{"code":"1"}"#,
            "`language` is missing; it is one of javascript",
        ),
        (r#"{"language":3,"code":"1"}"#, "`language` is a number"),
        (r#"{"language":"cobol","code":"1"}"#, "\"cobol\" is not one"),
        (r#"{"language":"python","code":"1"}"#, "runs no python"),
        (r#"{"language":"javascript"}"#, "`code` is missing"),
        (
            r#"{"language":"javascript","code":"  \n"}"#,
            "`code` is empty",
        ),
        (
            r#"{"language":"javascript","code":["x"]}"#,
            "`code` is an array",
        ),
        (
            r#"{"language":"javascript","code":"1","timeout_ms":0}"#,
            "`timeout_ms` is 0",
        ),
        (
            r#"{"language":"javascript","code":"1","timeout_ms":-5}"#,
            "`timeout_ms` is -5",
        ),
        (
            r#"{"language":"javascript","code":"1","timeout_ms":"9"}"#,
            "`timeout_ms` is a string",
        ),
        (
            r#"{"language":"javascript","code":"1","timeout_ms":1.5}"#,
            "`timeout_ms` is 1.5",
        ),
        (
            r#"{"language":"javascript","code":"1","session":"s"}"#,
            "unknown argument `session`",
        ),
    ] {
        let error = parse_arguments(raw, &facts).unwrap_err();
        assert!(
            error.contains(expected),
            "{raw:?}: {error:?} lacks {expected:?}"
        );
    }
}

#[tokio::test]
async fn a_malformed_call_is_a_tool_result_not_an_error() {
    let result = tool().call(r#"{"language": "python"}"#).await;
    assert!(result.is_error);
    assert_eq!(result.output.status, ToolStatus::InvalidArguments);
    let error = result.output.error.as_ref().unwrap();
    assert_eq!(error.kind, "invalid_arguments");
    assert!(result.text.contains("`code` is missing"), "{}", result.text);
    // (Key order aside: another crate in the build may make serde_json keep insertion order.)
    for expected in [
        "what to do: Nothing ran. Call run_code again with a JSON object such as {",
        "\"language\":\"javascript\"",
        "\"code\":\"console.log('hi'); 6 * 7\"",
    ] {
        assert!(
            result.text.contains(expected),
            "{expected} in {}",
            result.text
        );
    }
    let from_json = tool().call_json(&json!("not an object")).await;
    assert_eq!(from_json.output.status, ToolStatus::InvalidArguments);
}

#[tokio::test]
async fn a_daemon_that_is_not_there_is_a_tool_result_saying_so() {
    let result = tool().call(r#"{"language":"python","code":"1"}"#).await;
    assert!(result.is_error);
    assert_eq!(result.output.status, ToolStatus::Unavailable);
    assert_eq!(result.output.error.as_ref().unwrap().kind, "unreachable");
    assert!(result.text.contains("not reachable"), "{}", result.text);
    assert!(
        result.text.contains("Try the same call again"),
        "{}",
        result.text
    );
}

#[test]
fn every_status_renders_with_what_to_do() {
    let ok = rendered(ExecStatus::Ok, None);
    assert!(!ok.is_error);
    assert!(
        ok.text.starts_with("status: ok (python, 12.5 ms)\n"),
        "{}",
        ok.text
    );
    assert!(ok.text.contains("stdout:\npartial\n"), "{}", ok.text);
    assert!(!ok.text.contains("what to do"), "{}", ok.text);

    for (status, kind, advice) in [
        (ExecStatus::Error, ErrorKind::SyntaxError, "Fix the syntax"),
        (
            ExecStatus::Error,
            ErrorKind::Exception,
            "traceback in stderr",
        ),
        (
            ExecStatus::Timeout,
            ErrorKind::Timeout,
            "time limit of 5000 ms",
        ),
        (
            ExecStatus::Timeout,
            ErrorKind::Timeout,
            "larger timeout_ms (at most 60000 ms)",
        ),
        (ExecStatus::Error, ErrorKind::OutOfMemory, "(128 MiB)"),
        (
            ExecStatus::Error,
            ErrorKind::ResultTooLarge,
            "smaller value",
        ),
        (ExecStatus::Error, ErrorKind::SandboxFailure, "fresh one"),
        (
            ExecStatus::Error,
            ErrorKind::ResourceLimit,
            "fewer of that resource",
        ),
    ] {
        let result = rendered(status, Some(kind));
        assert!(result.is_error, "{kind}");
        let expected_status = if status == ExecStatus::Timeout {
            "timeout"
        } else {
            "error"
        };
        assert!(
            result
                .text
                .starts_with(&format!("status: {expected_status} ")),
            "{}",
            result.text
        );
        assert!(
            result
                .text
                .contains(&format!("error ({kind}): {kind} happened")),
            "{}",
            result.text
        );
        assert!(
            result.text.contains(advice),
            "{kind}: {advice:?} not in {}",
            result.text
        );
        assert!(
            result.text.contains("stdout:\npartial"),
            "output kept: {}",
            result.text
        );
    }
}

#[test]
fn refusals_say_whether_to_retry() {
    let tool = tool();
    for (kind, advice) in [
        (ErrorKind::Overloaded, "same call again in a few seconds"),
        (ErrorKind::NoSandboxAvailable, "same call again"),
        (ErrorKind::ShuttingDown, "same call again"),
        (ErrorKind::PayloadTooLarge, "at most 524288 bytes"),
        (ErrorKind::InvalidRequest, "Fix the arguments"),
        (ErrorKind::Internal, "not the program's fault"),
    ] {
        let result = tool.failed(&Error::Rejected {
            status: 503,
            error: ErrorBody::new(kind, "refused"),
            retry_after: Some(1),
        });
        assert_eq!(result.output.status, ToolStatus::Rejected);
        assert!(
            result.text.starts_with("status: refused (nothing ran)"),
            "{}",
            result.text
        );
        assert!(result.text.contains(advice), "{kind}: {}", result.text);
    }
    let lost = tool.failed(&Error::TimedOut {
        socket: "/s".into(),
        after: Duration::from_secs(1),
    });
    assert_eq!(lost.output.error.unwrap().kind, "answer_lost");
    assert!(
        lost.text.contains("may or may not have run"),
        "{}",
        lost.text
    );
}

#[test]
fn long_output_keeps_its_head_and_tail_within_the_budget() {
    let long: String = (0..20_000).map(|i| format!("line {i:05}\n")).collect();
    let mut response = response(ExecStatus::Ok, None, &long);
    response.stderr = "short warning\n".into();
    response.result = json!(42);
    let tool = tool().with_output_budget(1_000);
    let result = tool.ran(response, Language::Python, None, None);
    let out = &result.output;
    assert!(out.cut_to_budget);
    assert_eq!(out.stderr, "short warning\n", "a short part is kept whole");
    assert_eq!(out.result, json!(42));
    assert!(
        out.stdout.starts_with("line 00000\nline 00001\n"),
        "head kept"
    );
    assert!(out.stdout.ends_with("line 19999\n"), "tail kept");
    assert!(out.stdout.contains("characters cut here"), "marker");
    let kept = out.stdout.chars().count() - marker_length(&out.stdout);
    let share = 1_000 - "short warning\n".len() - "42".len();
    assert!(
        kept <= share && kept > share - 20,
        "{kept} of {share}: cut at whole lines"
    );
    // Whole lines on both sides of the marker: each is "line " and five digits.
    let (head, rest) = out.stdout.split_once("\n[... ").unwrap();
    let (_, tail) = rest.split_once("...]\n").unwrap();
    let last_of_head = head.lines().last().unwrap();
    let first_of_tail = tail.lines().next().unwrap();
    for line in [last_of_head, first_of_tail] {
        assert_eq!(line.len(), "line 00000".len(), "{line:?} is a whole line");
    }
    assert!(
        result.text.contains("its middle was cut"),
        "{}",
        result.text
    );
    // The daemon's own answer is not cut.
    assert_eq!(result.response.unwrap().stdout, long);
}

fn marker_length(text: &str) -> usize {
    let start = text.find("\n[... ").unwrap();
    let end = text[start..].find("...]\n").unwrap() + start + "...]\n".len();
    text[start..end].chars().count()
}

#[test]
fn a_budget_below_the_minimum_is_the_minimum() {
    assert_eq!(tool().with_output_budget(10).budget, MIN_OUTPUT_BUDGET);
    assert_eq!(tool().with_output_budget(5_000).budget, 5_000);
    assert_eq!(tool().budget, DEFAULT_OUTPUT_BUDGET);
}

#[test]
fn cutting_respects_characters_and_a_large_result() {
    let wide = "é".repeat(5_000);
    let cut = render::cut_to_budget(&wide, "", &json!("x".repeat(5_000)), 1_000);
    assert!(cut.cut);
    assert!(cut.stdout.starts_with(&"é".repeat(250)));
    assert!(cut.result.as_str().unwrap().contains("characters cut here"));
    let small = render::cut_to_budget("a", "b", &json!(1), 1_000);
    assert!(!small.cut);
    assert_eq!((small.stdout.as_str(), small.stderr.as_str()), ("a", "b"));
    assert_eq!(small.result, json!(1));
}

#[test]
fn the_daemons_cap_is_reported() {
    let mut response = response(ExecStatus::Ok, None, "x");
    response.truncated = true;
    let result = tool().ran(response, Language::Javascript, None, None);
    assert!(result.output.truncated);
    assert!(
        result.text.contains("more than the output cap"),
        "{}",
        result.text
    );
}

#[test]
fn the_structured_output_serializes_as_documented() {
    let result = rendered(ExecStatus::Timeout, Some(ErrorKind::Timeout));
    let value = serde_json::to_value(&result.output).unwrap();
    assert_eq!(value["status"], "timeout");
    assert_eq!(value["error"]["kind"], "timeout");
    assert!(
        value["error"]["advice"]
            .as_str()
            .unwrap()
            .contains("timeout_ms")
    );
    assert_eq!(value["stdout"], "partial\n");
}

#[test]
fn with_sessions_the_description_says_state_carries_over_and_failures_are_undone() {
    let stateless = tool();
    assert!(!stateless.keeps_state());
    let stateful = tool().with_sessions();
    assert!(stateful.keeps_state());
    let text = stateful.description();
    assert!(text.contains("State carries over between calls"), "{text}");
    assert!(text.contains("is undone"), "{text}");
    assert!(!text.contains("clean interpreter"), "{text}");
    assert!(text.contains("no network"), "{text}");
    let reaching = DaemonFacts {
        egress_rules: vec!["GET https://api.example.com/v1/".to_owned()],
        installs: true,
        ..facts()
    };
    let text = CodeTool::new(Client::connect("/nonexistent"), reaching).description();
    assert!(
        text.contains("may reach only these destinations: GET https://api.example.com/v1/"),
        "{text}"
    );
    assert!(!text.contains("There is no network"), "{text}");
    assert!(text.contains("%pip install NAME"), "{text}");
    assert!(!tool().description().contains("%pip"));
}

#[test]
fn a_rolled_back_call_and_a_session_notice_are_in_the_rendering() {
    let mut response = response(ExecStatus::Timeout, Some(ErrorKind::Timeout), "");
    response.session = Some(hyperlightd_api::ExecSession {
        id: "abc".into(),
        rolled_back: true,
        checkpoint: 3,
        restored_from_checkpoint: None,
        lost_execs: 0,
    });
    let result = tool().ran(response, Language::Python, Some(5_000), Some("the notice"));
    assert!(result.output.rolled_back);
    assert!(
        result.text.contains("this call was undone"),
        "{}",
        result.text
    );
    assert!(result.text.contains("note: the notice"), "{}", result.text);
    let structured = serde_json::to_value(&result.output).unwrap();
    assert_eq!(structured["rolled_back"], true);
    assert_eq!(structured["notice"], "the notice");
    let plain = rendered(ExecStatus::Ok, None);
    let structured = serde_json::to_value(&plain.output).unwrap();
    assert!(structured.get("rolled_back").is_none(), "{structured}");
}

#[tokio::test]
async fn closing_a_tool_without_sessions_or_daemon_does_nothing() {
    tool().close().await;
    tool().with_sessions().close().await;
}
