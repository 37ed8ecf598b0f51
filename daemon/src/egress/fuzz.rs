//! Property-based fuzzing of what egress reads from programs, redirects and the operator: URLs,
//! `Location`s, allow rules and secrets. Any input is read or refused without a panic; what is
//! read reads back the same; a rule within another allows nothing the other refuses; a secret's
//! value is never in what is said about it. `PROPTEST_CASES` sets the cases (256 by default;
//! developing.md has a longer run).

use proptest::prelude::*;

use super::rules::Rule;
use super::secrets::Secret;
use super::target::Target;

/// URL-like text: a scheme, an authority and a path made of the characters that matter.
fn url() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "(https?|ftp|HTTP)://[a-z0-9.\\-_\\[\\]:@%]{0,24}(/[a-z0-9./%?#=&\\\\-]{0,30})?",
    ]
}

/// Rule-like text: methods, a scheme, a host pattern, a port and a path prefix.
fn rule() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "((GET|POST|get)(,PUT)? )?(https?)://(\\*\\.)?(a|b\\.a|c\\.b\\.a|[0-9.]{1,9}|\\[::1\\])(:(80|443|8080))?(/(v1|v2|v1/x|\\.\\.)?/?)?",
    ]
}

proptest! {
    #[test]
    fn a_url_reads_back_the_same_and_a_redirect_from_it_is_read_or_refused(
        text in url(),
        location in url(),
    ) {
        if let Ok(target) = Target::parse(&text) {
            prop_assert_eq!(Target::parse(&target.to_string()).ok(), Some(target.clone()));
            let segments = target.path.split('/');
            prop_assert!(segments.clone().all(|s| s != "." && s != ".."), "{}", target);
            if let Ok(next) = target.join(&location) {
                prop_assert_eq!(Target::parse(&next.to_string()).ok(), Some(next));
            }
        }
    }

    #[test]
    fn a_rule_reads_back_the_same(text in rule()) {
        if let Ok(rule) = Rule::parse(&text) {
            prop_assert_eq!(Rule::parse(&rule.to_string()), Ok(rule));
        }
    }

    #[test]
    fn a_rule_within_another_allows_nothing_the_other_refuses(
        inner in rule(),
        outer in rule(),
        url in url(),
        method in "(GET|POST|PUT)",
    ) {
        let (Ok(inner), Ok(outer), Ok(target)) =
            (Rule::parse(&inner), Rule::parse(&outer), Target::parse(&url))
        else {
            return Ok(());
        };
        if inner.within(&outer) && inner.allows(&method, &target) {
            prop_assert!(outer.allows(&method, &target), "{} within {}: {}", inner, outer, target);
        }
    }

    #[test]
    fn a_secret_s_value_is_never_in_what_is_said_of_it(
        destination in rule(),
        header in "[a-z\\-]{0,12}",
        before in "[a-z ]{0,6}",
        after in "[a-z ]{0,6}",
        value in "[A-Z0-9{}:]{8,24}",
    ) {
        let line = format!("{destination} {header}: {before}{{env:TOKEN}}{after}");
        let env = |name: &str| (name == "TOKEN").then(|| value.clone());
        let said = match Secret::parse(&line, &env) {
            Ok(secret) => format!("{secret:?} {}", secret.describe()),
            Err(message) => message,
        };
        for window in value.as_bytes().windows(8) {
            let window = std::str::from_utf8(window).unwrap();
            prop_assert!(!said.contains(window), "{:?} shows {:?}", said, window);
        }
    }
}
