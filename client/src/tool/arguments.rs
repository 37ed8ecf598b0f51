//! The tool's arguments: their schema, and checking what a model sent against it. A model's
//! mistake becomes a message that says what was wrong and what a valid call looks like.

use hyperlightd_api::Language;
use serde_json::{Map, Value, json};

use super::DaemonFacts;

/// A valid call of the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arguments {
    /// Which guest runs the program.
    pub language: Language,
    /// The program.
    pub code: String,
    /// The time limit asked for, in milliseconds.
    pub timeout_ms: Option<u64>,
}

/// The fields the tool takes.
const FIELDS: &[&str] = &["language", "code", "timeout_ms"];

/// The JSON Schema of the arguments, for the languages the daemon serves.
pub(super) fn schema(facts: &DaemonFacts) -> Value {
    let languages: Vec<&str> = facts.languages.iter().map(|l| l.as_str()).collect();
    let mut timeout = json!({
        "type": "integer",
        "minimum": 1,
        "description": "Time limit for this run in milliseconds. Leave it out for the default; \
            raise it for long computations.",
    });
    if let Some(limits) = &facts.limits {
        timeout["maximum"] = limits.max_timeout_ms.into();
        timeout["description"] = format!(
            "Time limit for this run in milliseconds (default {}, at most {}). Raise it only \
             for long computations.",
            limits.default_timeout_ms, limits.max_timeout_ms
        )
        .into();
    }
    json!({
        "type": "object",
        "properties": {
            "language": {
                "type": "string",
                "enum": languages,
                "description": "The language of `code`.",
            },
            "code": {
                "type": "string",
                "description": "The whole program: every import and definition it needs. \
                    Its last expression statement's value is returned as `result`.",
            },
            "timeout_ms": timeout,
        },
        "required": ["language", "code"],
        "additionalProperties": false,
    })
}

/// Parses the model's raw argument string (OpenAI function calling hands the arguments over as
/// a JSON text). Arguments encoded twice (a JSON string holding the object) are accepted.
pub fn parse_arguments(raw: &str, facts: &DaemonFacts) -> Result<Arguments, String> {
    if raw.trim().is_empty() {
        return Err("the arguments are empty; expected a JSON object".to_owned());
    }
    let value: Value =
        serde_json::from_str(raw).map_err(|e| format!("the arguments are not valid JSON ({e})"))?;
    match value {
        Value::String(inner) if inner.trim_start().starts_with('{') => {
            let value: Value = serde_json::from_str(&inner)
                .map_err(|e| format!("the arguments are not valid JSON ({e})"))?;
            from_value(&value, facts)
        }
        value => from_value(&value, facts),
    }
}

/// Checks arguments that arrived as JSON.
pub(super) fn from_value(value: &Value, facts: &DaemonFacts) -> Result<Arguments, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("the arguments are {}, not a JSON object", kind_of(value)))?;
    if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown argument `{unknown}`; the tool takes {}",
            FIELDS.join(", ")
        ));
    }
    Ok(Arguments {
        language: language(object, facts)?,
        code: code(object)?,
        timeout_ms: timeout(object)?,
    })
}

fn language(object: &Map<String, Value>, facts: &DaemonFacts) -> Result<Language, String> {
    let served = served(facts);
    let name = match object.get("language") {
        None | Some(Value::Null) => {
            return Err(format!("`language` is missing; it is one of {served}"));
        }
        Some(Value::String(name)) => name,
        Some(other) => {
            return Err(format!(
                "`language` is {}, not a string; it is one of {served}",
                kind_of(other)
            ));
        }
    };
    let language: Language = name
        .trim()
        .to_ascii_lowercase()
        .parse()
        .map_err(|_| format!("`language` {name:?} is not one this tool runs: {served}"))?;
    if !facts.languages.contains(&language) {
        return Err(format!(
            "this daemon runs no {language} programs; `language` is one of {served}"
        ));
    }
    Ok(language)
}

fn code(object: &Map<String, Value>) -> Result<String, String> {
    match object.get("code") {
        None | Some(Value::Null) => Err("`code` is missing: send the program's source".to_owned()),
        Some(Value::String(code)) if code.trim().is_empty() => {
            Err("`code` is empty: there is nothing to run".to_owned())
        }
        Some(Value::String(code)) => Ok(code.clone()),
        Some(other) => Err(format!(
            "`code` is {}, not a string holding the program's source",
            kind_of(other)
        )),
    }
}

fn timeout(object: &Map<String, Value>) -> Result<Option<u64>, String> {
    let bad = |what: &str| {
        Err(format!(
            "`timeout_ms` is {what}; it is a whole number of milliseconds, at least 1, or left out"
        ))
    };
    match object.get("timeout_ms") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(0), _) => bad("0"),
            (Some(ms), _) => Ok(Some(ms)),
            // 5000.0 is a whole number too; models write numbers either way.
            (None, Some(f)) if f >= 1.0 && f.fract() == 0.0 && f < u64::MAX as f64 => {
                Ok(Some(f as u64))
            }
            _ => bad(&n.to_string()),
        },
        Some(other) => bad(kind_of(other)),
    }
}

/// What to do after invalid arguments: an example of a valid call.
pub(super) fn advice(facts: &DaemonFacts) -> String {
    let example = facts.languages.first().map_or("python", |l| l.as_str());
    let program = if example == "javascript" {
        "console.log('hi'); 6 * 7"
    } else {
        "print('hi'); 6 * 7"
    };
    format!(
        "Nothing ran. Call {} again with a JSON object such as {}; `language` is one of {}, \
         `timeout_ms` is optional.",
        super::TOOL_NAME,
        json!({ "language": example, "code": program }),
        served(facts)
    )
}

fn served(facts: &DaemonFacts) -> String {
    let names: Vec<&str> = facts.languages.iter().map(|l| l.as_str()).collect();
    names.join(", ")
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
