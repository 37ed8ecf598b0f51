//! The policy a program is checked against before it runs (`policy` in a request, and the
//! daemon's default, `--policy FILE`): validated here, combined, and cut to the language's part.
//! The check itself runs in the guest, on the program's own syntax tree (guest/python/runner.py,
//! guest/javascript/runner.js): hostile source is never parsed on the host.
//!
//! # Design: a check before the program runs
//! A request (or session exec) may carry a `policy`, and the daemon a default one (`--policy`);
//! the service (`service/code_policy.rs`) validates the request's, refuses rules of the other
//! language (400), combines the two (a request only narrows) and keeps the job's language's rules,
//! and the `Job` carries the result to the guest in the runner's event. The runner checks the
//! program on its own syntax tree before running anything: Python with `ast` (the tree it then
//! compiles from), JavaScript with acorn (already in the template for top-level `await`). The host
//! never parses the program, so hostile source meets only the guest. A refused program is a
//! runner reply like a syntax error (`policy_violation`, with `violations`), mapped like any other
//! program failure; the sandbox is restored as after any request. It is a guard rail, not a
//! boundary: a static check cannot follow `getattr(builtins, name)` with a name built at run time
//! or `[].constructor.constructor`; the micro-VM is what contains a program.

use crate::job::{Language, Policy};

/// A program's policy, named apart from the callers' access policy.
pub type CodePolicy = Policy;

/// A policy as a request or the daemon's `--policy` file gives it, checked by [`validate`]
/// before use.
impl From<hyperlightd_api::Policy> for Policy {
    fn from(policy: hyperlightd_api::Policy) -> Self {
        Policy {
            allowed_modules: policy.allowed_modules,
            blocked_functions: policy.blocked_functions,
            blocked_globals: policy.blocked_globals,
        }
    }
}

/// `one` and `other` together: a module is allowed only where both allow it, and a name
/// blocked by either is blocked.
pub fn and(one: &Policy, other: &Policy) -> Policy {
    let allowed_modules = match (&one.allowed_modules, &other.allowed_modules) {
        (None, None) => None,
        (Some(list), None) | (None, Some(list)) => Some(list.clone()),
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
        blocked_functions: union(&one.blocked_functions, &other.blocked_functions),
        blocked_globals: union(&one.blocked_globals, &other.blocked_globals),
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

/// Names a policy may list, and how long each may be: far more than any real policy needs,
/// and the event the runner parses stays small.
const MAX_NAMES: usize = 1000;
const MAX_NAME_BYTES: usize = 200;

/// Whether a name is one a rule can match.
type NameCheck = fn(&str) -> bool;

/// Why a policy is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy: {0}")]
pub struct PolicyError(String);

/// Checks that every name of `policy` is one its rule can match: a dotted Python name in
/// `allowed_modules`, an identifier in `blocked_functions` and `blocked_globals`.
pub fn validate(policy: &Policy) -> Result<(), PolicyError> {
    let lists: [(&str, &[String], NameCheck); 3] = [
        (
            "allowed_modules",
            policy.allowed_modules.as_deref().unwrap_or_default(),
            |name| name.split('.').all(python_identifier),
        ),
        (
            "blocked_functions",
            &policy.blocked_functions,
            python_identifier,
        ),
        (
            "blocked_globals",
            &policy.blocked_globals,
            javascript_identifier,
        ),
    ];
    for (rule, names, valid) in lists {
        if names.len() > MAX_NAMES {
            return Err(PolicyError(format!(
                "{rule} lists {} names; at most {MAX_NAMES}",
                names.len()
            )));
        }
        if let Some(bad) = names
            .iter()
            .find(|name| name.len() > MAX_NAME_BYTES || !valid(name))
        {
            return Err(PolicyError(format!(
                "{rule}: {bad:?} is not a name it can match (an identifier{}, at most \
                 {MAX_NAME_BYTES} bytes)",
                if rule == "allowed_modules" {
                    " or dotted identifiers"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(())
}

/// Refuses a request's policy with rules of another language: a Python program has no
/// globals to block, a JavaScript program no modules to allow.
pub fn fits(policy: &Policy, language: Language) -> Result<(), PolicyError> {
    let foreign: &[(&str, bool)] = match language {
        Language::Python => &[("blocked_globals", !policy.blocked_globals.is_empty())],
        Language::Javascript => &[
            ("allowed_modules", policy.allowed_modules.is_some()),
            ("blocked_functions", !policy.blocked_functions.is_empty()),
        ],
    };
    match foreign.iter().find(|(_, set)| *set) {
        Some((rule, _)) => Err(PolicyError(format!(
            "{rule} does not apply to {language} programs"
        ))),
        None => Ok(()),
    }
}

/// The policy a `language` program is checked against: `default` narrowed by `request`,
/// cut to the language's rules; None when it restricts nothing.
pub fn effective(default: &Policy, request: Option<&Policy>, language: Language) -> Option<Policy> {
    let both = match request {
        Some(request) => and(default, request),
        None => default.clone(),
    };
    let policy = match language {
        Language::Python => Policy {
            blocked_globals: Vec::new(),
            ..both
        },
        Language::Javascript => Policy {
            blocked_globals: both.blocked_globals,
            ..Policy::default()
        },
    };
    (!policy.is_empty()).then_some(policy)
}

fn python_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

fn javascript_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c == '$' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c == '$' || c.is_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn combined_policies_allow_only_what_both_allow_and_block_what_either_blocks() {
        let daemon = Policy {
            allowed_modules: Some(names(&["os", "json", "math"])),
            blocked_functions: names(&["eval"]),
            ..Policy::default()
        };
        let request = Policy {
            allowed_modules: Some(names(&["os.path", "json", "socket"])),
            blocked_functions: names(&["open", "eval"]),
            blocked_globals: names(&["Function"]),
        };
        let both = and(&daemon, &request);
        assert_eq!(both.allowed_modules, Some(names(&["json", "os.path"])));
        assert_eq!(both.blocked_functions, ["eval", "open"]);
        assert_eq!(both.blocked_globals, ["Function"]);
        assert_eq!(
            and(&Policy::default(), &request),
            and(&request, &Policy::default())
        );
        assert!(Policy::default().is_empty());
        assert!(!both.is_empty());
    }

    #[test]
    fn a_prefix_must_end_at_a_dot() {
        let a = Policy {
            allowed_modules: Some(names(&["os"])),
            ..Policy::default()
        };
        let b = Policy {
            allowed_modules: Some(names(&["ossaudiodev", "os.path"])),
            ..Policy::default()
        };
        assert_eq!(and(&a, &b).allowed_modules, Some(names(&["os.path"])));
    }

    #[test]
    fn names_must_be_what_their_rule_can_match() {
        let ok = Policy {
            allowed_modules: Some(names(&["os.path", "json", "_private"])),
            blocked_functions: names(&["eval", "__import__"]),
            blocked_globals: names(&["Function", "$eval"]),
        };
        assert_eq!(validate(&ok), Ok(()));
        for bad in [
            Policy {
                allowed_modules: Some(names(&["os..path"])),
                ..Policy::default()
            },
            Policy {
                allowed_modules: Some(names(&[".relative"])),
                ..Policy::default()
            },
            Policy {
                blocked_functions: names(&["ev al"]),
                ..Policy::default()
            },
            Policy {
                blocked_functions: names(&["$x"]),
                ..Policy::default()
            },
            Policy {
                blocked_globals: names(&["1st"]),
                ..Policy::default()
            },
            Policy {
                blocked_globals: names(&[&"x".repeat(MAX_NAME_BYTES + 1)]),
                ..Policy::default()
            },
            Policy {
                blocked_globals: vec!["x".into(); MAX_NAMES + 1],
                ..Policy::default()
            },
        ] {
            assert!(validate(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_request_may_not_carry_another_language_s_rules() {
        let python = Policy {
            allowed_modules: Some(names(&["json"])),
            ..Policy::default()
        };
        let javascript = Policy {
            blocked_globals: names(&["eval"]),
            ..Policy::default()
        };
        assert!(fits(&python, Language::Python).is_ok());
        assert!(fits(&javascript, Language::Javascript).is_ok());
        let err = fits(&javascript, Language::Python).unwrap_err();
        assert!(err.to_string().contains("blocked_globals"), "{err}");
        assert!(fits(&python, Language::Javascript).is_err());
    }

    #[test]
    fn the_default_applies_narrowed_by_the_request_and_cut_to_the_language() {
        let default = Policy {
            allowed_modules: Some(names(&["json", "math"])),
            blocked_functions: names(&["eval"]),
            blocked_globals: names(&["Function"]),
        };
        let request = Policy {
            allowed_modules: Some(names(&["json"])),
            ..Policy::default()
        };
        assert_eq!(
            effective(&default, Some(&request), Language::Python),
            Some(Policy {
                allowed_modules: Some(names(&["json"])),
                blocked_functions: names(&["eval"]),
                blocked_globals: Vec::new(),
            })
        );
        assert_eq!(
            effective(&default, None, Language::Javascript),
            Some(Policy {
                blocked_globals: names(&["Function"]),
                ..Policy::default()
            })
        );
        assert_eq!(effective(&Policy::default(), None, Language::Python), None);
        let javascript_only = Policy {
            blocked_globals: names(&["eval"]),
            ..Policy::default()
        };
        assert_eq!(effective(&javascript_only, None, Language::Python), None);
    }
}
