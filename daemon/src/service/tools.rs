//! Tool declarations checked: each name a function name in both languages that clashes with
//! nothing the runtimes already have, each schema a valid JSON Schema of an object.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::job::tools::Tool;

/// A tool as a request declares it, before it is checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// The most tools one request may declare.
pub const MAX_TOOLS: usize = 64;
/// The longest tool name.
const MAX_NAME: usize = 64;
/// The longest description.
const MAX_DESCRIPTION: usize = 4096;

/// Names no tool may take: Python's keywords and built-ins, JavaScript's reserved words and the
/// properties every object has, and what the tools module itself holds.
const RESERVED: &[&str] = &[
    // Python keywords and soft keywords.
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "case",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "match",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "type",
    "while",
    "with",
    "yield",
    "_",
    // Python built-ins a program may shadow by importing a tool by name.
    "abs",
    "all",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "vars",
    "zip",
    // JavaScript reserved words and literals.
    "arguments",
    "catch",
    "const",
    "debugger",
    "default",
    "delete",
    "do",
    "enum",
    "export",
    "extends",
    "false",
    "function",
    "implements",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "public",
    "static",
    "switch",
    "this",
    "throw",
    "true",
    "typeof",
    "undefined",
    "var",
    "void",
    "NaN",
    "Infinity",
    // What every JavaScript object has.
    "constructor",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toLocaleString",
    "toString",
    "valueOf",
    // What the runtimes' `tools` holds besides the tools.
    "ToolError",
    "tools",
];

/// `declared`, checked and compiled; else why a declaration is refused, naming it.
pub fn check(declared: Vec<Declared>) -> Result<Vec<Tool>, String> {
    if declared.len() > MAX_TOOLS {
        return Err(format!(
            "tools: {} declared, at most {MAX_TOOLS}",
            declared.len()
        ));
    }
    let mut seen = BTreeSet::new();
    declared
        .into_iter()
        .enumerate()
        .map(|(i, tool)| {
            let at = format!("tools[{i}] ({:?})", tool.name);
            check_name(&tool.name).map_err(|why| format!("{at}: {why}"))?;
            if !seen.insert(tool.name.clone()) {
                return Err(format!("{at}: declared twice"));
            }
            if tool.description.len() > MAX_DESCRIPTION {
                return Err(format!(
                    "{at}: the description is over {MAX_DESCRIPTION} bytes"
                ));
            }
            let validator = check_parameters(&tool.parameters)
                .map_err(|why| format!("{at}: parameters: {why}"))?;
            Ok(Tool {
                name: tool.name,
                description: tool.description,
                parameters: tool.parameters,
                validator: Arc::new(validator),
            })
        })
        .collect()
}

/// Whether `name` is a function name in both languages that clashes with nothing.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(
            "a tool's name is a function name: ASCII letters, digits and '_', not starting \
             with a digit"
                .to_owned(),
        );
    }
    if name.len() > MAX_NAME {
        return Err(format!("the name is longer than {MAX_NAME} characters"));
    }
    if name.starts_with("__") || RESERVED.contains(&name) {
        return Err(
            "the name is a keyword or built-in of Python or JavaScript, or taken by the tools \
             module: choose another"
                .to_owned(),
        );
    }
    Ok(())
}

/// `parameters` compiled, when it is a valid JSON Schema of an object.
fn check_parameters(parameters: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    let Some(schema) = parameters.as_object() else {
        return Err("a JSON Schema object is expected (`{\"type\": \"object\", ...}`)".to_owned());
    };
    match schema.get("type") {
        None => {}
        Some(serde_json::Value::String(kind)) if kind == "object" => {}
        Some(other) => {
            return Err(format!(
                "the arguments are named, so the schema's type is \"object\", not {other}"
            ));
        }
    }
    jsonschema::validator_for(parameters).map_err(|e| format!("not a valid JSON Schema: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn declared(name: &str, parameters: serde_json::Value) -> Declared {
        Declared {
            name: name.to_owned(),
            description: String::new(),
            parameters,
        }
    }

    #[test]
    fn good_declarations_are_compiled() {
        let tools = check(vec![
            declared(
                "get_weather",
                json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            ),
            declared("_private2", json!({})),
        ])
        .unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "_private2"]);
    }

    #[test]
    fn each_bad_declaration_is_refused_naming_it() {
        let any = || json!({"type": "object"});
        let cases = [
            (
                vec![declared("2fast", any())],
                "tools[0] (\"2fast\"): a tool's name",
            ),
            (vec![declared("get-weather", any())], "function name"),
            (vec![declared("", any())], "function name"),
            (vec![declared("print", any())], "keyword or built-in"),
            (vec![declared("constructor", any())], "keyword or built-in"),
            (vec![declared("__init__", any())], "keyword or built-in"),
            (vec![declared(&"a".repeat(65), any())], "longer than 64"),
            (
                vec![declared("a", any()), declared("a", any())],
                "tools[1] (\"a\"): declared twice",
            ),
            (vec![declared("a", json!("object"))], "a JSON Schema object"),
            (
                vec![declared("a", json!({"type": "array"}))],
                "not \"array\"",
            ),
            (
                vec![declared(
                    "a",
                    json!({"type": "object", "minProperties": "x"}),
                )],
                "not a valid JSON Schema",
            ),
        ];
        for (declarations, expected) in cases {
            let refused = check(declarations).unwrap_err();
            assert!(
                refused.contains(expected),
                "{refused} (expected {expected})"
            );
        }
        let many = (0..65).map(|i| declared(&format!("t{i}"), any())).collect();
        assert!(check(many).unwrap_err().contains("at most 64"));
    }
}

#[cfg(test)]
mod fuzz {
    //! Property-based fuzzing of a caller's tool declarations and of the arguments a program
    //! calls them with (`PROPTEST_CASES` sets the cases): any declaration is compiled or
    //! refused, naming it, without a panic; a compiled tool's schema judges any arguments
    //! without one.

    use proptest::prelude::*;
    use serde_json::Value;

    use super::*;

    /// JSON, with the schema keywords that make a validator work most likely.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            prop_oneof![
                Just("object"),
                Just("string"),
                Just("integer"),
                Just("array"),
                Just("^a+$"),
                Just("(a+)+$"),
                Just("#/definitions/x"),
                Just("#"),
                Just("date-time"),
            ]
            .prop_map(Value::from),
            "[ -~]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            let key = prop_oneof![
                Just("type".to_owned()),
                Just("properties".to_owned()),
                Just("required".to_owned()),
                Just("pattern".to_owned()),
                Just("$ref".to_owned()),
                Just("items".to_owned()),
                Just("minimum".to_owned()),
                Just("format".to_owned()),
                Just("definitions".to_owned()),
                "[a-z]{1,6}",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(key, inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_declaration_is_compiled_or_refused_and_judges_any_arguments(
            name in prop_oneof!["[a-zA-Z_][a-zA-Z0-9_]{0,8}", any::<String>()],
            parameters in json(),
            arguments in json(),
        ) {
            let declared = Declared { name, description: String::new(), parameters };
            match check(vec![declared]) {
                Ok(tools) => {
                    let _ = tools[0].validator.is_valid(&arguments);
                }
                Err(why) => prop_assert!(why.starts_with("tools[0]"), "{}", why),
            }
        }
    }
}
