//! E2B's messages, as its SDKs read them, made from what the daemon answers: a sandbox's
//! description, and the lines of the code interpreter's `/execute` stream.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use hyperlightd_api::{ExecEvent, ExecResponse, Language, SessionInfo};
use serde_json::{Value, json};

/// The label naming the sandbox a context's session belongs to (the default context's session
/// is the sandbox: its id is the sandbox's, and it has no such label).
pub const SANDBOX: &str = "e2b.dev/sandbox";
/// The labels a sandbox's default session keeps its template and metadata in.
pub const TEMPLATE: &str = "e2b.dev/template";
pub const METADATA: &str = "e2b.dev/metadata";
/// What a sandbox's session is: `sandbox` (its default context) or `context`.
pub const KIND: &str = "e2b.dev/kind";
/// The label of a context's session saying it is the sandbox's default for its language.
pub const DEFAULT_CONTEXT: &str = "e2b.dev/default";
/// `none` on a sandbox created without internet access.
pub const NETWORK: &str = "e2b.dev/network";

/// What the SDKs check a sandbox's envd against: the features of this version are the ones
/// they may use (the gateway refuses clearly what it does not serve).
pub const ENVD_VERSION: &str = "0.4.0";

/// The template E2B's code interpreter SDKs ask for by default.
pub const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";

/// The language of a sandbox's default context for `template`: None for a template this
/// gateway does not know (the answer lists those it does).
pub fn template_language(template: &str) -> Option<Language> {
    match template {
        DEFAULT_TEMPLATE | "code-interpreter" | "python" | "base" => Some(Language::Python),
        "javascript" | "js" | "node" => Some(Language::Javascript),
        _ => None,
    }
}

pub const TEMPLATES: &str = "code-interpreter-v1, code-interpreter, base and python (Python, \
    with JavaScript in contexts), javascript (JavaScript first)";

/// A language as `run_code` and `create_code_context` name it.
pub fn language(name: &str) -> Option<Language> {
    match name {
        "python" | "py" => Some(Language::Python),
        "js" | "javascript" => Some(Language::Javascript),
        _ => None,
    }
}

/// A sandbox as `Sandbox.create` and `connect` read it. The SDKs send a sandbox's requests
/// with its access tokens rather than the API key: they are the key, which the caller holds.
pub fn created(info: &SessionInfo, key: &str) -> Value {
    json!({
        "templateID": info.labels.get(TEMPLATE).map_or(DEFAULT_TEMPLATE, String::as_str),
        "sandboxID": info.id,
        "clientID": "hyperlightd",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": key,
        "trafficAccessToken": key,
    })
}

/// A sandbox as `get_info` and `list` read it.
pub fn detail(info: &SessionInfo) -> Value {
    let metadata: Value = info
        .labels
        .get(METADATA)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| json!({}));
    json!({
        "templateID": info.labels.get(TEMPLATE).map_or(DEFAULT_TEMPLATE, String::as_str),
        "sandboxID": info.id,
        "clientID": "hyperlightd",
        "startedAt": info.created_at,
        "endAt": info.expires_at,
        "envdVersion": ENVD_VERSION,
        "cpuCount": 1,
        "memoryMB": info.memory_bytes.div_ceil(1 << 20),
        "diskSizeMB": 0,
        "state": if info.parked { "paused" } else { "running" },
        "metadata": metadata,
    })
}

/// A context as `create_code_context` and `list_code_contexts` read it.
pub fn context(info: &SessionInfo) -> Value {
    json!({
        "id": info.id,
        "language": info.language.to_string(),
        "cwd": "/home/user",
    })
}

/// The stream lines for one event of the daemon's: `language` is the context's, for the
/// result's text.
pub fn lines(event: ExecEvent, language: Language) -> Vec<Value> {
    match event {
        ExecEvent::Stdout { text } => vec![output("stdout", text)],
        ExecEvent::Stderr { text } => vec![output("stderr", text)],
        ExecEvent::Display { data, result: last } => vec![result(&data, last)],
        ExecEvent::Result(response) => ended(response, language),
        ExecEvent::Error { error } => vec![json!({
            "type": "error",
            "name": "GatewayError",
            "value": error.message,
            "traceback": "",
        })],
        _ => Vec::new(),
    }
}

fn output(kind: &str, text: String) -> Value {
    json!({"type": kind, "text": text, "timestamp": now_nanos()})
}

/// What ends the stream: the program's value as the main result, or its error, and the count.
fn ended(response: ExecResponse, language: Language) -> Vec<Value> {
    let mut lines = Vec::new();
    if !response.result.is_null() {
        let text = shown(&response.result, language);
        let mut data = BTreeMap::from([("text/plain".to_owned(), text)]);
        if response.result.is_object() || response.result.is_array() {
            data.insert("application/json".to_owned(), response.result.to_string());
        }
        lines.push(result(&data, true));
    }
    if let Some(error) = response.error {
        let (name, value) = match error.message.split_once(": ") {
            Some((name, value)) if !name.contains(' ') => (name.to_owned(), value.to_owned()),
            _ => (format!("{:?}", error.kind), error.message.clone()),
        };
        lines.push(json!({
            "type": "error",
            "name": name,
            "value": value,
            "traceback": response.stderr,
        }));
    }
    let count = response.session.map_or(0, |session| session.checkpoint);
    lines.push(json!({"type": "number_of_executions", "execution_count": count}));
    lines
}

/// A result line from display data (MIME type to content).
fn result(data: &BTreeMap<String, String>, main: bool) -> Value {
    let mut line = json!({"type": "result", "is_main_result": main});
    for (mime, content) in data {
        let field = match mime.as_str() {
            "text/plain" => "text",
            "text/html" => "html",
            "text/markdown" => "markdown",
            "image/svg+xml" => "svg",
            "image/png" => "png",
            "image/jpeg" => "jpeg",
            "application/pdf" => "pdf",
            "text/latex" => "latex",
            "application/javascript" => "javascript",
            "application/json" => {
                line["json"] = serde_json::from_str(content).unwrap_or(Value::Null);
                continue;
            }
            _ => continue,
        };
        line[field] = Value::String(content.clone());
    }
    line
}

/// A value as a notebook shows it: Python's `repr` for Python (strings quoted, `True`,
/// `None`), JSON for JavaScript.
fn shown(value: &Value, language: Language) -> String {
    if language != Language::Python {
        return match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
    }
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(text) => python_str(text),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|v| shown(v, language)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}: {}", python_str(k), shown(v, language)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// `text` as Python's `repr` writes a string.
fn python_str(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Now, as E2B's stream stamps output: nanoseconds since the epoch.
fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_values_are_shown_as_repr_shows_them() {
        let value = json!({"a": [1, 2.5, true, null], "b": "it's"});
        assert_eq!(
            shown(&value, Language::Python),
            r#"{'a': [1, 2.5, True, None], 'b': "it's"}"#
        );
        assert_eq!(shown(&json!("a\nb'c\""), Language::Python), r#"'a\nb\'c"'"#);
        assert_eq!(shown(&json!("x"), Language::Javascript), "x");
        assert_eq!(shown(&json!([1, "x"]), Language::Javascript), r#"[1,"x"]"#);
    }

    #[test]
    fn display_data_becomes_a_result_of_its_kinds() {
        let data = BTreeMap::from([
            ("image/png".to_owned(), "iVBOR".to_owned()),
            ("text/plain".to_owned(), "<Figure>".to_owned()),
            ("application/x-unknown".to_owned(), "?".to_owned()),
        ]);
        let line = result(&data, false);
        assert_eq!(
            line,
            json!({"type": "result", "is_main_result": false, "png": "iVBOR", "text": "<Figure>"})
        );
        // A table left as the program's last expression is its main result, as in a notebook.
        let table = BTreeMap::from([("text/html".to_owned(), "<table/>".to_owned())]);
        let shown = |result| ExecEvent::Display {
            data: table.clone(),
            result,
        };
        for flag in [false, true] {
            let [line] = &lines(shown(flag), Language::Python)[..] else {
                panic!("one line");
            };
            assert_eq!(line["is_main_result"], flag);
        }
    }

    #[test]
    fn templates_and_languages_are_e2bs_names() {
        assert_eq!(template_language(DEFAULT_TEMPLATE), Some(Language::Python));
        assert_eq!(template_language("javascript"), Some(Language::Javascript));
        assert_eq!(template_language("desktop"), None);
        assert_eq!(language("js"), Some(Language::Javascript));
        assert_eq!(language("r"), None);
    }
}
