//! Which packages may be installed, as the operator says: names allowed and names denied (a
//! name, or a prefix ending in `*`, `*` alone for every name; a denial wins), the largest wheel,
//! the most installs a session holds.

use std::str::FromStr;

use pep508_rs::PackageName;

use super::Refusal;

/// A name the allow or deny list gives: one package, or every name with a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Name(PackageName),
    /// Every name beginning so (normalized); empty: every name.
    Prefix(String),
}

impl Pattern {
    /// A pattern from the command line; else why not.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err("an empty name names no package".to_owned());
        }
        if let Some(prefix) = text.strip_suffix('*') {
            if prefix.contains('*') {
                return Err(format!("{text:?}: `*` may only end a name"));
            }
            let normal = prefix.to_ascii_lowercase().replace(['_', '.'], "-");
            if !normal
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                return Err(format!("{text:?} is not a package name or prefix"));
            }
            return Ok(Pattern::Prefix(normal));
        }
        PackageName::from_str(text)
            .map(Pattern::Name)
            .map_err(|e| format!("{text:?} is not a package name: {e}"))
    }

    fn matches(&self, name: &PackageName) -> bool {
        match self {
            Pattern::Name(own) => own == name,
            Pattern::Prefix(prefix) => name.as_ref().starts_with(prefix.as_str()),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::Name(name) => write!(f, "{name}"),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// What may be installed.
#[derive(Debug, Clone)]
pub struct Policy {
    pub allow: Vec<Pattern>,
    pub deny: Vec<Pattern>,
    /// The largest wheel, in bytes.
    pub max_wheel_bytes: u64,
    /// The most packages a session installs, dependencies included.
    pub max_per_session: usize,
}

impl Policy {
    /// Whether `name` may be installed (brought in by `by`, if a dependency); else why not.
    pub fn admit(&self, name: &PackageName, by: Option<&PackageName>) -> Result<(), Refusal> {
        let denied = |rule: String| Refusal::Denied {
            name: name.clone(),
            by: by.cloned(),
            rule,
        };
        if let Some(pattern) = self.deny.iter().find(|p| p.matches(name)) {
            return Err(denied(format!("the daemon's deny list names {pattern}")));
        }
        if !self.allow.iter().any(|p| p.matches(name)) {
            return Err(denied(
                "the daemon's allow list does not name it".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> PackageName {
        PackageName::from_str(text).unwrap()
    }

    #[test]
    fn a_denial_wins_and_prefixes_match_normalized_names() {
        let policy = Policy {
            allow: vec![Pattern::parse("*").unwrap()],
            deny: vec![
                Pattern::parse("Evil_Pkg").unwrap(),
                Pattern::parse("types.*").unwrap(),
            ],
            max_wheel_bytes: 1,
            max_per_session: 1,
        };
        assert!(policy.admit(&name("humanize"), None).is_ok());
        assert!(policy.admit(&name("evil-pkg"), None).is_err());
        let refused = policy
            .admit(&name("types_requests"), Some(&name("x")))
            .unwrap_err();
        assert!(
            refused.to_string().contains("types-requests (needed by x)"),
            "{refused}"
        );
        assert!(refused.to_string().contains("types-*"), "{refused}");
        let narrow = Policy {
            allow: vec![Pattern::parse("msgpack").unwrap()],
            deny: vec![],
            ..policy
        };
        assert!(narrow.admit(&name("msgpack"), None).is_ok());
        assert!(narrow.admit(&name("humanize"), None).is_err());
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in ["a*b*", "a b", "", "caf\u{e9}*"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
