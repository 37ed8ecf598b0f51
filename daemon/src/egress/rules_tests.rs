use super::*;

fn rule(text: &str) -> Rule {
    Rule::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn target(url: &str) -> Target {
    Target::parse(url).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_rule_reads_and_prints_its_one_line_form() {
    for text in [
        "https://api.example.com",
        "GET,POST https://*.example.com/v1/",
        "http://127.0.0.1:8080",
        "https://[::1]:8443/x",
        "DELETE https://a.example.com:8443/items",
    ] {
        assert_eq!(rule(text).to_string(), text);
    }
    assert_eq!(
        rule("get https://API.Example.com.:443/").to_string(),
        "GET https://api.example.com"
    );
}

#[test]
fn bad_rules_are_refused_saying_why() {
    let cases = [
        ("api.example.com", "no scheme"),
        ("ftp://example.com", "not served"),
        ("https://exa mple.com", "a rule is"),
        ("https://user@example.com", "user name"),
        ("https://example.com:99999", "not a port"),
        ("https://example.com:0", "port 0"),
        ("https://*", "not a host"),
        ("https://a..b", "not a host"),
        ("https://ex%61mple.com", "not a host"),
        ("CONNECT https://example.com", "not a method"),
        ("TRACE https://example.com", "not a method"),
        ("https://example.com/a/../b", "'..'"),
        ("https://example.com/a?b", "no '?'"),
        ("https://[::1", "not closed"),
        // Found by egress/fuzz.rs: read as the name "0.0.0.0", printed as the address.
        ("http://0.0.0.0.", "a.b.c.d"),
        ("http://127.1", "a.b.c.d"),
        ("http://*.10.0", "a.b.c.d"),
    ];
    for (text, expected) in cases {
        let refused = Rule::parse(text).unwrap_err();
        assert!(refused.contains(expected), "{text}: {refused}");
    }
}

#[test]
fn a_rule_allows_its_scheme_host_port_methods_and_path_only() {
    let api = rule("GET,POST https://api.example.com/v1");
    assert!(api.allows("GET", &target("https://api.example.com/v1")));
    assert!(api.allows("POST", &target("https://API.example.com:443/v1/chat?x=1")));
    assert!(
        !api.allows("DELETE", &target("https://api.example.com/v1/x")),
        "method"
    );
    assert!(
        !api.allows("GET", &target("https://api.example.com/v10")),
        "segment"
    );
    assert!(
        !api.allows("GET", &target("https://api.example.com/")),
        "path"
    );
    assert!(
        !api.allows("GET", &target("http://api.example.com/v1")),
        "scheme"
    );
    assert!(
        !api.allows("GET", &target("https://api.example.com:8443/v1")),
        "port"
    );
    assert!(!api.allows("GET", &target("https://evil.com/v1")), "host");

    let any = rule("https://*.example.com");
    assert!(any.allows("PUT", &target("https://a.b.example.com/x")));
    assert!(
        !any.allows("GET", &target("https://example.com/")),
        "the domain itself"
    );
    assert!(!any.allows("GET", &target("https://badexample.com/")));
    assert!(!any.allows("GET", &target("https://example.com.evil.net/")));

    let local = rule("http://127.0.0.1:8080");
    assert!(local.allows("GET", &target("http://127.0.0.1:8080/")));
    assert!(!local.allows("GET", &target("http://localhost:8080/")));
}

#[test]
fn a_narrowing_rule_is_within_the_rule_it_narrows() {
    let outer = rule("GET,POST https://*.example.com/v1/");
    for inside in [
        "GET https://api.example.com/v1/",
        "GET,POST https://*.eu.example.com/v1/models",
        "POST https://*.example.com/v1/x/",
    ] {
        assert!(rule(inside).within(&outer), "{inside}");
    }
    for outside in [
        "https://api.example.com/v1/",          // any method: wider
        "GET https://example.com/v1/",          // the domain itself
        "GET https://api.example.com/v2/",      // another path
        "GET https://api.example.com/",         // any path
        "GET http://api.example.com/v1/",       // another scheme
        "GET https://api.example.com:8443/v1/", // another port
        "GET https://*.com/v1/",                // a wider domain
    ] {
        assert!(!rule(outside).within(&outer), "{outside}");
    }
    assert!(rule("https://a.example.com").within(&rule("https://a.example.com")));
}

#[test]
fn urls_that_read_differently_to_a_server_are_refused() {
    let cases = [
        ("example.com/x", "not an absolute URL"),
        ("/x", "not an absolute URL"),
        ("file:///etc/passwd", "not served"),
        ("gopher://example.com/", "not served"),
        ("https://user:pw@example.com/", "user name or password"),
        ("https://example.com/a/../admin", "'..'"),
        ("https://example.com/a/%2e%2E/admin", "'..'"),
        ("https://example.com/a%2fb", "encoded '/'"),
        ("https://127.1/", "four decimal numbers"),
        ("https://2130706433/", "four decimal numbers"),
        ("https://0x7f.0.0.1/", "four decimal numbers"),
        ("https://example.com:0/", "port 0"),
    ];
    for (url, expected) in cases {
        let refused = Target::parse(url).unwrap_err();
        assert!(
            refused.message.contains(expected),
            "{url}: {}",
            refused.message
        );
    }
    let t = target("https://Example.COM./a/b?q=1#frag");
    assert_eq!(t.to_string(), "https://example.com/a/b?q=1");
    assert_eq!(t.path, "/a/b");
    let v6 = target("http://[::1]:8080/");
    assert_eq!(v6.authority(), "[::1]:8080");
    assert_eq!(v6.host_text(), "::1");
}

#[test]
fn a_redirect_location_is_read_from_the_url_it_came_from() {
    let from = target("https://a.example.com:8443/dir/page?x=1");
    let joined = |location: &str| from.join(location).unwrap().to_string();
    assert_eq!(joined("https://b.example.com/x"), "https://b.example.com/x");
    assert_eq!(joined("//c.example.com/y"), "https://c.example.com/y");
    assert_eq!(joined("/root?z=2"), "https://a.example.com:8443/root?z=2");
    assert_eq!(joined("next"), "https://a.example.com:8443/dir/next");
    assert!(from.join("../up").is_err());
}
