//! A session's labels: names and values its creator gives it, kept with it (on disk too) and
//! shown wherever it is, so that a caller finds its sessions by what they are for (a
//! conversation, a user, an E2B sandbox) without keeping a table of ids of its own.
//!
//! The rules are those of Kubernetes' labels, roomier in values: a name is an optional prefix
//! and `/`, then letters, digits, `-`, `_` and `.`, beginning and ending with a letter or digit;
//! a value any text without control characters. Both are bounded, and so is their count, since
//! every list of sessions carries them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// At most this many labels on a session.
pub const MAX_LABELS: usize = 32;
/// A name's longest, prefix included, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// A value's longest, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024;
/// All names and values of a session together, in bytes.
pub const MAX_TOTAL_BYTES: usize = 8192;

/// A session's labels, checked: made only by [`Labels::new`], read from disk included.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    try_from = "BTreeMap<String, String>",
    into = "BTreeMap<String, String>"
)]
pub struct Labels(BTreeMap<String, String>);

impl TryFrom<BTreeMap<String, String>> for Labels {
    type Error = String;

    fn try_from(labels: BTreeMap<String, String>) -> Result<Labels, String> {
        Labels::new(labels)
    }
}

impl From<Labels> for BTreeMap<String, String> {
    fn from(labels: Labels) -> Self {
        labels.0
    }
}

impl Labels {
    /// `labels` if they follow the rules; otherwise which one does not, and why.
    pub fn new(labels: BTreeMap<String, String>) -> Result<Labels, String> {
        if labels.len() > MAX_LABELS {
            return Err(format!(
                "{} labels; at most {MAX_LABELS} are allowed",
                labels.len()
            ));
        }
        let mut total = 0;
        for (name, value) in &labels {
            check_name(name)?;
            check_value(name, value)?;
            total += name.len() + value.len();
        }
        if total > MAX_TOTAL_BYTES {
            return Err(format!(
                "the labels' names and values come to {total} bytes; at most {MAX_TOTAL_BYTES} \
                 are allowed"
            ));
        }
        Ok(Labels(labels))
    }

    /// Whether these labels have every one of `wanted`'s, with the same value.
    pub fn has_all(&self, wanted: &Labels) -> bool {
        wanted
            .0
            .iter()
            .all(|(name, value)| self.0.get(name) == Some(value))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let shown = shown(name);
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "label name {shown} is {} bytes long; at most {MAX_NAME_BYTES} are allowed",
            name.len()
        ));
    }
    let (prefix, rest) = match name.split_once('/') {
        Some((prefix, rest)) => (Some(prefix), rest),
        None => (None, name),
    };
    let part_ok = |part: &str, extra: &[char]| {
        let alnum = |c: char| c.is_ascii_alphanumeric();
        part.starts_with(alnum)
            && part.ends_with(alnum)
            && part.chars().all(|c| alnum(c) || extra.contains(&c))
    };
    if prefix.is_some_and(|prefix| !part_ok(prefix, &['-', '.'])) {
        return Err(format!(
            "label name {shown}: its prefix (before '/') must be letters, digits, '-' and '.', \
             beginning and ending with a letter or digit"
        ));
    }
    if !part_ok(rest, &['-', '_', '.']) {
        return Err(format!(
            "label name {shown} must be letters, digits, '-', '_' and '.' (after an optional \
             prefix and '/'), beginning and ending with a letter or digit"
        ));
    }
    Ok(())
}

fn check_value(name: &str, value: &str) -> Result<(), String> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "the value of label {} is {} bytes long; at most {MAX_VALUE_BYTES} are allowed",
            shown(name),
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!(
            "the value of label {} holds a control character",
            shown(name)
        ));
    }
    Ok(())
}

/// `name` quoted for an error message, cut short if long.
fn shown(name: &str) -> String {
    let cut: String = name.chars().take(40).collect();
    if cut.len() < name.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Result<Labels, String> {
        Labels::new(
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn names_and_values_that_follow_the_rules_are_kept() {
        let ok = labels(&[
            ("conversation", "c-42"),
            ("e2b.dev/sandbox", "sbx_1"),
            ("a", ""),
            ("user_id", "ünïcode and spaces"),
        ])
        .unwrap();
        assert_eq!(ok.as_map().len(), 4);
        assert!(labels(&[]).unwrap().is_empty());
    }

    #[test]
    fn each_rule_refuses_with_the_label_it_refuses() {
        for (name, value, says) in [
            ("", "v", "must be letters"),
            ("-a", "v", "must be letters"),
            ("a-", "v", "must be letters"),
            ("a b", "v", "must be letters"),
            ("a/b/c", "v", "must be letters"),
            ("pre_fix/a", "v", "its prefix"),
            ("/a", "v", "its prefix"),
            ("a", "line\nbreak", "control character"),
        ] {
            let error = labels(&[(name, value)]).unwrap_err();
            assert!(error.contains(says), "{name:?}: {error}");
            assert!(error.contains(&format!("{name:?}")), "{error}");
        }
        let long = "n".repeat(MAX_NAME_BYTES + 1);
        assert!(labels(&[(&long, "v")]).unwrap_err().contains("bytes long"));
        let value = "v".repeat(MAX_VALUE_BYTES + 1);
        assert!(labels(&[("a", &value)]).unwrap_err().contains("bytes long"));
    }

    #[test]
    fn the_count_and_the_total_are_bounded() {
        let names: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}")).collect();
        let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
        assert!(labels(&many).unwrap_err().contains("at most 32"));
        let value = "v".repeat(MAX_VALUE_BYTES);
        let names: Vec<String> = (0..9).map(|i| format!("l{i}")).collect();
        let big: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), value.as_str())).collect();
        assert!(labels(&big).unwrap_err().contains("come to"));
    }

    #[test]
    fn labels_read_back_from_json_are_checked_as_given_ones_are() {
        let kept = labels(&[("a", "1")]).unwrap();
        let text = serde_json::to_string(&kept).unwrap();
        assert_eq!(text, r#"{"a":"1"}"#);
        assert_eq!(serde_json::from_str::<Labels>(&text).unwrap(), kept);
        let error = serde_json::from_str::<Labels>(r#"{"a b":"1"}"#).unwrap_err();
        assert!(error.to_string().contains(r#"label name "a b""#), "{error}");
    }

    #[test]
    fn a_filter_matches_sessions_with_all_its_labels() {
        let session = labels(&[("a", "1"), ("b", "2")]).unwrap();
        assert!(session.has_all(&labels(&[]).unwrap()));
        assert!(session.has_all(&labels(&[("a", "1")]).unwrap()));
        assert!(session.has_all(&labels(&[("a", "1"), ("b", "2")]).unwrap()));
        assert!(!session.has_all(&labels(&[("a", "2")]).unwrap()));
        assert!(!session.has_all(&labels(&[("c", "1")]).unwrap()));
    }
}
