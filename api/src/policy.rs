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

    /// This policy and `other` together: a module is allowed only where both allow it, and a
    /// name blocked by either is blocked.
    pub fn and(&self, other: &Policy) -> Policy {
        let allowed_modules = match (&self.allowed_modules, &other.allowed_modules) {
            (None, None) => None,
            (Some(one), None) | (None, Some(one)) => Some(one.clone()),
            (Some(mine), Some(theirs)) => Some(narrowest(mine, theirs)),
        };
        let union = |a: &[String], b: &[String]| {
            let mut names: Vec<String> = a.iter().chain(b).cloned().collect();
            names.sort();
            names.dedup();
            names
        };
        Policy {
            allowed_modules,
            blocked_functions: union(&self.blocked_functions, &other.blocked_functions),
            blocked_globals: union(&self.blocked_globals, &other.blocked_globals),
        }
    }
}

/// The modules both lists allow: each name of one list that the other allows (itself or a
/// prefix of it listed).
fn narrowest(a: &[String], b: &[String]) -> Vec<String> {
    let allows = |list: &[String], module: &str| {
        list.iter().any(|allowed| {
            module == allowed
                || module
                    .strip_prefix(allowed.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    };
    let mut both: Vec<String> = a
        .iter()
        .filter(|m| allows(b, m))
        .chain(b.iter().filter(|m| allows(a, m)))
        .cloned()
        .collect();
    both.sort();
    both.dedup();
    both
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

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(names: &[&str]) -> Option<Vec<String>> {
        Some(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn combined_policies_allow_only_what_both_allow_and_block_what_either_blocks() {
        let daemon = Policy {
            allowed_modules: modules(&["os", "json", "math"]),
            blocked_functions: vec!["eval".into()],
            ..Policy::default()
        };
        let request = Policy {
            allowed_modules: modules(&["os.path", "json", "socket"]),
            blocked_functions: vec!["open".into(), "eval".into()],
            blocked_globals: vec!["Function".into()],
        };
        let both = daemon.and(&request);
        assert_eq!(both.allowed_modules, modules(&["json", "os.path"]));
        assert_eq!(both.blocked_functions, ["eval", "open"]);
        assert_eq!(both.blocked_globals, ["Function"]);
        assert_eq!(
            Policy::default().and(&request),
            request.and(&Policy::default())
        );
        assert!(Policy::default().is_empty());
        assert!(!both.is_empty());
    }

    #[test]
    fn a_prefix_must_end_at_a_dot() {
        let a = Policy {
            allowed_modules: modules(&["os"]),
            ..Policy::default()
        };
        let b = Policy {
            allowed_modules: modules(&["ossaudiodev", "os.path"]),
            ..Policy::default()
        };
        assert_eq!(a.and(&b).allowed_modules, modules(&["os.path"]));
    }
}
