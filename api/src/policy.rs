//! The policy a program is checked against before it runs: which modules a Python program may
//! import, which functions and globals it may not name. A static check, made by the guest on
//! the program's own syntax tree: a guard rail for well-meaning agents, not the security
//! boundary (the micro-VM is).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Part of `POST /v1/exec` and of a session's exec. Every field is optional; a daemon started
/// with a default policy applies it too, and a request can only narrow it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Python: the only modules the program may import. A module is allowed when its dotted
    /// name or a dotted prefix of it is listed (`os` allows `os.path`). With a list, relative
    /// imports and `__import__` are refused too. Absent: any module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_modules: Option<Vec<String>>,
    /// Python: functions the program may not name, whether it calls them or not (`eval`,
    /// `exec`, `open`, `compile`), also as attributes of `builtins` or `__builtins__`; with a
    /// list, naming `__builtins__` at all is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_functions: Vec<String>,
    /// JavaScript: globals the program may not name (`eval`, `Function`), also as properties of
    /// `globalThis`, `self`, `window` or `global`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_globals: Vec<String>,
}

impl Policy {
    /// Whether the policy restricts nothing.
    pub fn is_empty(&self) -> bool {
        self.allowed_modules.is_none()
            && self.blocked_functions.is_empty()
            && self.blocked_globals.is_empty()
    }
}

/// One thing a program names that its policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Violation {
    /// The line it is on, from 1.
    pub line: u32,
    /// The rule that refuses it: `allowed_modules`, `blocked_functions` or `blocked_globals`.
    pub rule: String,
    /// What was refused: a module, a function or a global's name (`__import__` for a dynamic
    /// import; a relative import as written, with its leading dots).
    pub name: String,
}
