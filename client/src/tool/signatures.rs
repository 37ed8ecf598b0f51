//! The functions a program may call, as a model should write their calls: one signature and
//! docstring per tool in each language, generated from its JSON Schema.

use std::fmt::Write;

use hyperlightd_api::{Language, ToolSpec};
use serde_json::Value;

/// The description's paragraph on `tools` for `languages`.
pub(super) fn section(tools: &[ToolSpec], languages: &[Language]) -> String {
    let mut text = String::from(
        " The program may call these functions, which run outside the sandbox and return \
         decoded JSON; a failing one raises (Python: `tools.ToolError`, an Exception; \
         JavaScript: rejects with an Error), which the program may catch. Arguments the \
         function's schema does not accept fail at the call, naming the argument. Calling them \
         in a loop and returning only what matters is the way to use many results.",
    );
    for language in languages {
        match language {
            Language::Python => {
                text.push_str(
                    "\nIn python (`import tools` or the global `tools`; `from tools import \
                     name` works too):\n",
                );
                for tool in tools {
                    text.push_str(&python(tool));
                }
            }
            Language::Javascript => {
                text.push_str(
                    "\nIn javascript (the global `tools`; every function returns a Promise: \
                     `await` it, `Promise.all` runs several at once):\n",
                );
                for tool in tools {
                    text.push_str(&javascript(tool));
                }
            }
        }
    }
    text
}

/// One argument of a tool, as its schema gives it.
struct Parameter<'a> {
    name: &'a str,
    schema: &'a Value,
    required: bool,
}

fn parameters(tool: &ToolSpec) -> Vec<Parameter<'_>> {
    let required: Vec<&str> = tool.parameters["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut parameters: Vec<Parameter<'_>> = tool.parameters["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, schema)| Parameter {
                    name,
                    schema,
                    required: required.contains(&name.as_str()),
                })
                .collect()
        })
        .unwrap_or_default();
    // Required ones first, as Python needs them before those with defaults; by name within
    // each, whatever order the schema's object kept (serde_json's depends on its features).
    parameters.sort_by_key(|p| (!p.required, p.name));
    parameters
}

fn python(tool: &ToolSpec) -> String {
    let arguments: Vec<String> = parameters(tool)
        .iter()
        .map(|p| {
            let kind = python_type(p.schema);
            if p.required {
                format!("{}: {kind}", p.name)
            } else {
                format!("{}: {kind} | None = None", p.name)
            }
        })
        .collect();
    let star = if arguments.is_empty() { "" } else { "*, " };
    let mut text = format!(
        "def tools.{}({star}{}) -> Any:\n",
        tool.name,
        arguments.join(", ")
    );
    let lines = doc_lines(tool);
    if !lines.is_empty() {
        let _ = writeln!(text, "    \"\"\"{}", lines.join("\n    "));
        text.push_str("    \"\"\"\n");
    }
    text
}

fn javascript(tool: &ToolSpec) -> String {
    let fields: Vec<String> = parameters(tool)
        .iter()
        .map(|p| {
            let optional = if p.required { "" } else { "?" };
            format!("{}{optional}: {}", p.name, javascript_type(p.schema))
        })
        .collect();
    let argument = if fields.is_empty() {
        String::new()
    } else {
        format!("args: {{{}}}", fields.join(", "))
    };
    let mut text = format!("tools.{}({argument}): Promise<any>\n", tool.name);
    for line in doc_lines(tool) {
        let _ = writeln!(text, "    // {line}");
    }
    text
}

/// The lines of the tool's docstring: its description, then each argument's.
fn doc_lines(tool: &ToolSpec) -> Vec<String> {
    let mut lines: Vec<String> = tool.description.lines().map(str::to_owned).collect();
    for p in parameters(tool) {
        let mut facts = Vec::new();
        if let Some(description) = p.schema["description"].as_str() {
            facts.push(description.to_owned());
        }
        if let Some(choices) = p.schema["enum"].as_array() {
            let choices: Vec<String> = choices.iter().map(Value::to_string).collect();
            facts.push(format!("one of {}", choices.join(", ")));
        }
        if let Some(default) = p.schema.get("default") {
            facts.push(format!("default {default}"));
        }
        if !facts.is_empty() {
            lines.push(format!("{}: {}", p.name, facts.join("; ")));
        }
    }
    lines
}

fn python_type(schema: &Value) -> String {
    match schema["type"].as_str() {
        Some("string") => "str".into(),
        Some("integer") => "int".into(),
        Some("number") => "float".into(),
        Some("boolean") => "bool".into(),
        Some("null") => "None".into(),
        Some("array") => match schema.get("items") {
            Some(items) => format!("list[{}]", python_type(items)),
            None => "list".into(),
        },
        Some("object") => "dict".into(),
        _ => "Any".into(),
    }
}

fn javascript_type(schema: &Value) -> String {
    match schema["type"].as_str() {
        Some("string") => "string".into(),
        Some("integer" | "number") => "number".into(),
        Some("boolean") => "boolean".into(),
        Some("null") => "null".into(),
        Some("array") => match schema.get("items") {
            Some(items) => format!("{}[]", javascript_type(items)),
            None => "any[]".into(),
        },
        Some("object") => "object".into(),
        _ => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn weather() -> ToolSpec {
        ToolSpec::new(
            "get_weather",
            "The weather in a city now.",
            json!({
                "type": "object",
                "properties": {
                    "units": {"type": "string", "enum": ["c", "f"], "default": "c"},
                    "city": {"type": "string", "description": "The city's name"},
                    "days": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["city"],
            }),
        )
    }

    #[test]
    fn python_takes_keyword_arguments_required_first_with_a_docstring() {
        let text = python(&weather());
        assert_eq!(
            text,
            "def tools.get_weather(*, city: str, days: list[int] | None = None, units: str | None \
             = None) -> Any:\n    \"\"\"The weather in a city now.\n    city: The city's name\n    \
             units: one of \"c\", \"f\"; default \"c\"\n    \"\"\"\n"
        );
    }

    #[test]
    fn javascript_takes_one_object_and_returns_a_promise() {
        let text = javascript(&weather());
        assert!(
            text.starts_with(
                "tools.get_weather(args: {city: string, days?: number[], units?: string}): \
                 Promise<any>\n    // The weather in a city now.\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_tool_without_arguments_takes_none() {
        let tool = ToolSpec::new("now", "", json!({"type": "object"}));
        assert_eq!(python(&tool), "def tools.now() -> Any:\n");
        assert_eq!(javascript(&tool), "tools.now(): Promise<any>\n");
    }

    #[test]
    fn the_section_names_each_language_the_daemon_serves() {
        let text = section(&[weather()], &[Language::Javascript]);
        assert!(text.contains("In javascript"), "{text}");
        assert!(!text.contains("In python"), "{text}");
    }
}
