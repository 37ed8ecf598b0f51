//! Tools a program may call: declared in an exec, called from the program as functions, each
//! call sent to the caller in the exec's stream and answered with `POST
//! /v1/executions/{execution_id}/tool-results`.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// A tool the program may call, in the shape of OpenAI's and Anthropic's tool definitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The function's name in the program: an identifier in both languages (letters, digits
    /// and `_`, not starting with a digit, at most 64 characters), not a keyword or a name the
    /// runtimes already give `tools`.
    pub name: String,
    /// What the tool does, for the model (and the generated docstring).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// A JSON Schema of its arguments, an object (`{"type": "object", "properties": ...}`).
    /// A call whose arguments it does not accept fails in the program and is not sent.
    #[serde(default = "any_object")]
    pub parameters: serde_json::Value,
}

fn any_object() -> serde_json::Value {
    serde_json::json!({"type": "object"})
}

impl ToolSpec {
    /// A tool named `name` doing `description`, with arguments `parameters`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }
}

/// Body of `POST /v1/executions/{execution_id}/tool-results`: the answer to one call, its
/// result or an error (exactly one of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The call's id, as its `tool_call` event gave it.
    pub id: String,
    /// What the tool returned: any JSON value, which the program gets decoded.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<serde_json::Value>,
    /// The tool failed: the message the program's exception (Python `ToolError`, JavaScript
    /// `Error`) carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A field that is there, even as `null`, is `Some`.
fn present<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

impl ToolResult {
    /// The answer to call `id`: `result`.
    pub fn ok(id: impl Into<String>, result: serde_json::Value) -> Self {
        ToolResult {
            id: id.into(),
            result: Some(result),
            error: None,
        }
    }

    /// The answer to call `id`: the tool failed with `message`.
    pub fn error(id: impl Into<String>, message: impl Into<String>) -> Self {
        ToolResult {
            id: id.into(),
            result: None,
            error: Some(message.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_null_result_is_a_result_and_parameters_default_to_any_object() {
        let answer: ToolResult =
            serde_json::from_value(json!({"id": "c", "result": null})).unwrap();
        assert_eq!(answer.result, Some(serde_json::Value::Null));
        let answer: ToolResult = serde_json::from_value(json!({"id": "c", "error": "no"})).unwrap();
        assert_eq!((answer.result, answer.error.as_deref()), (None, Some("no")));
        let spec: ToolSpec = serde_json::from_value(json!({"name": "now"})).unwrap();
        assert_eq!(spec.parameters, json!({"type": "object"}));
    }
}
