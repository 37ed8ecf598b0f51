use super::*;

fn parse(args: &[&str]) -> Result<Config, clap::Error> {
    Config::try_parse_from(std::iter::once("hyperlightd").chain(args.iter().copied()))
}

#[test]
fn defaults_give_a_javascript_pool_and_consistent_limits() {
    let config = parse(&[]).unwrap();
    assert_eq!(
        config.pool_sizes().unwrap(),
        BTreeMap::from([(Language::Javascript, 2)])
    );
    let limits = config.limits().unwrap();
    assert_eq!(limits.max_body_bytes, 1024 * 1024);
    assert!(config.max_connections > 0);
}

#[test]
fn caller_options_resolve_names_default_their_quotas_and_refuse_zero_or_unknown() {
    let config = parse(&[
        "--pool",
        "javascript=5",
        "--allow-uid",
        "root",
        "--allow-gid",
        "7",
    ])
    .unwrap();
    let access = config.callers.access(999).unwrap();
    assert!(access.is_restricted());
    let quota = config
        .callers
        .exec_quota(&config.pool_sizes().unwrap())
        .unwrap();
    assert!(quota.is_empty(), "no cap unless one is set: {quota:?}");
    assert_eq!(config.sessions().unwrap().max_per_caller, 500);
    assert!(
        !parse(&[])
            .unwrap()
            .callers
            .access(0)
            .unwrap()
            .is_restricted()
    );

    let unknown = parse(&["--allow-uid", "no-such-user-here"]).unwrap();
    let err = unknown.callers.access(0).unwrap_err().to_string();
    assert!(err.contains("no-such-user-here"), "{err}");
    let unknown = parse(&["--allow-gid", "no-such-group-here"]).unwrap();
    assert!(unknown.callers.access(0).is_err());
    let unknown = parse(&["--delegate-uid", "no-such-user-here"]).unwrap();
    let err = unknown.callers.access(0).unwrap_err().to_string();
    assert!(err.starts_with("--delegate-uid no-such-user-here"), "{err}");
    let delegates = parse(&["--delegate-uid", "root", "--delegate-uid", "7"]).unwrap();
    let access = delegates.callers.access(999).unwrap();
    assert!(access.is_delegate(0) && access.is_delegate(7) && !access.is_delegate(999));
    let zero = parse(&["--max-execs-per-caller", "0"]).unwrap();
    assert!(zero.callers.exec_quota(&BTreeMap::new()).is_err());
    let zero = parse(&["--max-sessions-per-caller", "0"]).unwrap();
    let err = zero.sessions().unwrap_err().to_string();
    assert!(err.contains("--max-sessions-per-caller"), "{err}");
    let set = parse(&[
        "--max-execs-per-caller",
        "7",
        "--max-sessions-per-caller",
        "3",
    ])
    .unwrap();
    let sizes = BTreeMap::from([(Language::Python, 1)]);
    assert_eq!(
        set.callers.exec_quota(&sizes).unwrap()[&Language::Python],
        7
    );
    assert_eq!(set.sessions().unwrap().max_per_caller, 3);
}

#[test]
fn a_header_limit_too_small_for_any_request_is_rejected() {
    let config = parse(&["--max-header-bytes", "100"]).unwrap();
    assert!(matches!(
        config.limits(),
        Err(ConfigError::HeaderLimitTooSmall(100))
    ));
}

#[test]
fn zero_connections_or_timeouts_are_rejected() {
    for option in [
        "--max-connections",
        "--idle-timeout-ms",
        "--body-read-timeout-ms",
    ] {
        let err = parse(&[option, "0"]).unwrap().limits().unwrap_err();
        assert!(err.to_string().contains(option), "{err}");
    }
}

#[test]
fn the_native_python_runtime_needs_its_rootfs_and_some_memory() {
    let missing = parse(&[
        "--pool",
        "python=1",
        "--python-runtime",
        "native",
        "--python-rootfs",
        "/nonexistent/python.cpio",
    ])
    .unwrap();
    assert!(matches!(
        missing.pool_sizes(),
        Err(ConfigError::PythonRootfsMissing(path)) if path.ends_with("python.cpio")
    ));
    // Without a Python pool the rootfs is not needed.
    let unused = parse(&[
        "--python-runtime",
        "native",
        "--python-rootfs",
        "/nonexistent",
    ]);
    assert!(unused.unwrap().pool_sizes().is_ok());
    let err = parse(&["--python-native-memory-mib", "0"])
        .unwrap()
        .limits()
        .unwrap_err();
    assert!(
        err.to_string().contains("--python-native-memory-mib"),
        "{err}"
    );
    let err = parse(&["--python-runtime", "cobol"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("native") && err.contains("wasm"), "{err}");
}

#[test]
fn pool_spec_with_zero_count_is_rejected() {
    let err = parse(&["--pool", "javascript=0"]).unwrap_err().to_string();
    assert!(err.contains("at least one sandbox"), "{err}");
}

#[test]
fn pool_spec_with_unknown_language_is_rejected() {
    let err = parse(&["--pool", "cobol=1"]).unwrap_err().to_string();
    assert!(err.contains("unknown language"), "{err}");
}

#[test]
fn python_pool_without_its_guest_is_a_configuration_error() {
    let config = parse(&[
        "--pool",
        "python=1",
        "--python-guest",
        "/nonexistent/python.aot",
    ])
    .unwrap();
    let err = config.pool_sizes().unwrap_err();
    assert!(matches!(err, ConfigError::PythonGuestMissing(_)), "{err}");
    assert!(
        err.to_string().contains("cargo xtask python-guest"),
        "{err}"
    );
}

#[test]
fn python_pool_without_its_library_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let guest = dir.path().join("python.aot");
    std::fs::write(&guest, b"").unwrap();
    let guest = guest.to_str().unwrap();
    let config = parse(&["--pool", "python=1", "--python-guest", guest]).unwrap();
    assert_eq!(config.python_library(), dir.path().join("python-lib.tar"));
    let err = config.pool_sizes().unwrap_err();
    assert!(matches!(err, ConfigError::PythonLibraryMissing(_)), "{err}");
    assert!(err.to_string().contains("--python-lib"), "{err}");

    let lib = dir.path().join("other.tar");
    std::fs::write(&lib, b"").unwrap();
    let lib = lib.to_str().unwrap();
    let config = parse(&[
        "--pool",
        "python=1",
        "--python-guest",
        guest,
        "--python-lib",
        lib,
    ]);
    assert!(config.unwrap().pool_sizes().is_ok());
}

#[test]
fn duplicate_pool_is_rejected() {
    let config = parse(&["--pool", "javascript=1", "--pool", "js=2"]).unwrap();
    assert!(matches!(
        config.pool_sizes(),
        Err(ConfigError::DuplicatePool(Language::Javascript))
    ));
}

#[test]
fn timeout_is_defaulted_and_capped() {
    let limits = parse(&["--default-timeout-ms", "100", "--max-timeout-ms", "1000"])
        .unwrap()
        .limits()
        .unwrap();
    assert_eq!(limits.timeout_for(None), Duration::from_millis(100));
    assert_eq!(limits.timeout_for(Some(500)), Duration::from_millis(500));
    assert_eq!(limits.timeout_for(Some(5000)), Duration::from_millis(1000));
}

#[test]
fn output_cap_is_defaulted_to_and_capped_at_the_maximum() {
    let limits = parse(&["--max-output-bytes", "1000"])
        .unwrap()
        .limits()
        .unwrap();
    assert_eq!(limits.output_for(None), 1000);
    assert_eq!(limits.output_for(Some(10)), 10);
    assert_eq!(limits.output_for(Some(5000)), 1000);
}

#[test]
fn session_limits_are_checked() {
    let defaults = parse(&[]).unwrap().sessions().unwrap();
    assert!(defaults.default_idle <= defaults.max_idle);
    assert_eq!(defaults.memory_budget, 4096 << 20);
    assert_eq!(
        (defaults.max_checkpoints, defaults.max_checkpoint_bytes),
        (4, 64 << 20)
    );
    for flag in [
        "--max-sessions",
        "--session-checkpoints",
        "--session-checkpoint-mib",
    ] {
        let zero = parse(&[flag, "0"]).unwrap().sessions();
        assert!(
            matches!(zero, Err(ConfigError::Zero(f)) if f == flag),
            "{flag}"
        );
    }
    assert!(matches!(
        parse(&[
            "--session-idle-timeout-s",
            "100",
            "--max-session-idle-timeout-s",
            "10"
        ])
        .unwrap()
        .sessions(),
        Err(ConfigError::SessionIdleAboveMax {
            default: 100,
            max: 10
        })
    ));
}

#[test]
fn default_timeout_above_max_is_rejected() {
    let config = parse(&["--default-timeout-ms", "10", "--max-timeout-ms", "5"]).unwrap();
    assert!(matches!(
        config.limits(),
        Err(ConfigError::DefaultAboveMax { .. })
    ));
}

#[test]
fn the_policy_file_s_network_adds_to_the_egress_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    let file = path.to_str().unwrap();
    write(
        r#"{"blocked_globals": ["eval"],
            "network": {"allow": [{"scheme": "https", "host": "*.example.com", "methods": ["GET"]}]}}"#,
    );
    let config = parse(&["--policy", file]).unwrap();
    let (code, rules) = config.policy_file().unwrap();
    assert_eq!(code.blocked_globals, ["eval"]);
    let rules: Vec<String> = rules.iter().map(ToString::to_string).collect();
    assert_eq!(rules, ["GET https://*.example.com"]);
    let env = |_: &str| None;
    let parts = config.egress.parts(Vec::new(), &env).unwrap();
    assert!(parts.is_none(), "no rule: egress is off");

    for (text, expected) in [
        (
            r#"{"network": {"allow": [{"scheme": "ftp", "host": "a.com"}]}}"#,
            "network.allow[0]",
        ),
        (
            r#"{"network": {"allow": [{"scheme": "https"}]}}"#,
            "network: missing field `host`",
        ),
        (r#"{"network": {"deny": []}}"#, "unknown field `deny`"),
        (r#"{"blocked_globalz": []}"#, "unknown field"),
    ] {
        write(text);
        let refused = parse(&["--policy", file])
            .unwrap()
            .policy_file()
            .unwrap_err();
        assert!(refused.to_string().contains(expected), "{text}: {refused}");
    }
}

#[test]
fn egress_options_are_checked_at_startup() {
    let env = |name: &str| (name == "TOKEN").then(|| "t".to_owned());
    let parts = |args: &[&str]| parse(args).unwrap().egress.parts(Vec::new(), &env);
    let on = parts(&[
        "--egress-allow",
        "https://api.example.com",
        "--egress-allow",
        "GET http://10.0.0.1:8080",
    ])
    .unwrap()
    .expect("rules given");
    assert_eq!(on.rules.len(), 2);
    for (args, expected) in [
        (
            &["--egress-allow", "api.example.com"][..],
            "--egress-allow \"api.example.com\": no scheme",
        ),
        (
            &["--egress-secret", "https://a.com X: {env:TOKEN}"][..],
            "needs a destination",
        ),
        (
            &[
                "--egress-allow",
                "https://a.com",
                "--egress-secret",
                "https://a.com X: {env:NOPE}",
            ][..],
            "NOPE is not set",
        ),
        (
            &[
                "--egress-allow",
                "https://a.com",
                "--egress-max-requests",
                "0",
            ][..],
            "must be above 0",
        ),
        (
            &[
                "--egress-allow",
                "https://a.com",
                "--egress-ca-file",
                "/no/such.pem",
            ][..],
            "--egress-ca-file /no/such.pem",
        ),
    ] {
        let refused = parts(args).unwrap_err();
        assert!(refused.contains(expected), "{args:?}: {refused}");
    }
}

#[test]
fn priming_is_each_runtimes_own_by_default_the_operators_on_request_and_refuses_other_values() {
    use crate::sandbox::pool::Priming;
    assert_eq!(parse(&[]).unwrap().prime.priming(), None);
    for (value, priming) in [
        ("auto", None),
        ("when-idle", Some(Priming::WhenIdle)),
        ("never", Some(Priming::Never)),
    ] {
        assert_eq!(parse(&["--prime", value]).unwrap().prime.priming(), priming);
    }
    let refused = parse(&["--prime", "sometimes"]).unwrap_err().to_string();
    for value in ["auto", "when-idle", "never"] {
        assert!(refused.contains(value), "{refused}");
    }
}

#[test]
fn the_log_names_a_pools_priming_as_the_option_does() {
    use clap::ValueEnum;
    for prime in [Prime::WhenIdle, Prime::Never] {
        let name = prime.to_possible_value().unwrap();
        assert_eq!(prime.priming().unwrap().as_str(), name.get_name());
    }
}

#[test]
fn sessions_are_lowered_to_what_the_kernels_cap_on_mappings_holds() {
    let config = parse(&[]).unwrap();
    let settings = config.sessions().unwrap();
    // Defaults: 1000 sessions of 4 checkpoints, and the default pool's sandboxes.
    let sandboxes: u64 = config.pools.iter().map(|pool| pool.size as u64).sum();
    let own = MAPPINGS_OF_OUR_OWN + MAPPINGS_PER_SANDBOX * sandboxes;
    let per_session = 4 * MAPPINGS_PER_CHECKPOINT;
    // A cap that holds them all changes nothing.
    let roomy = own + 1000 * per_session;
    let (kept, lowered) = config.sessions_within_mappings(settings, roomy).unwrap();
    assert_eq!((kept.max_sessions, kept.max_per_caller), (1000, 500));
    assert_eq!(lowered, None);
    // Linux's default cap holds fewer: the cap and the derived per-caller quota come down.
    let (fitted, lowered) = config.sessions_within_mappings(settings, 65_530).unwrap();
    let fit = ((65_530 - own) / per_session) as usize;
    assert!(fit > 100 && fit < 1000, "{fit}");
    assert_eq!((fitted.max_sessions, fitted.max_per_caller), (fit, fit / 2));
    assert_eq!(
        lowered,
        Some(Lowered {
            from: 1000,
            to: fit,
            per_session
        })
    );
    // An explicit per-caller quota stays unless it is above the new cap.
    for (quota, expected) in [("10", 10), ("900", fit)] {
        let config = parse(&["--max-sessions-per-caller", quota]).unwrap();
        let (fitted, _) = config
            .sessions_within_mappings(config.sessions().unwrap(), 65_530)
            .unwrap();
        assert_eq!(fitted.max_per_caller, expected, "{quota}");
    }
    // Fewer checkpoints a session, more sessions.
    let one = parse(&["--session-checkpoints", "1"]).unwrap();
    let (fitted, _) = one
        .sessions_within_mappings(one.sessions().unwrap(), 65_530)
        .unwrap();
    assert!(fitted.max_sessions > fit);
    // A cap that holds not one session is a configuration error that says what to do.
    let refused = config.sessions_within_mappings(settings, own + per_session - 1);
    match refused {
        Err(e @ ConfigError::TooFewMappings { .. }) => {
            assert!(e.to_string().contains("vm.max_map_count"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}
