//! The service driven directly, with no transport: what it lets through to the executor, what
//! it refuses, and what it records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyperlightd_api::ErrorKind;

use super::*;
use crate::audit::testing::{lines, log_in};
use crate::caller::{Access, ExecQuota};
use crate::executor::testing::{StubExecutor, ok_outcome};
use crate::job::{Failure, FailureKind, Outcome, Policy, Status};

const CALLER: Caller = Caller {
    uid: 1000,
    gid: 1000,
    pid: Some(42),
    pod: crate::job::PodOf::Unread,
    on_behalf_of: None,
};

fn limits() -> Limits {
    Limits {
        default_timeout: Duration::from_millis(5_000),
        max_timeout: Duration::from_millis(10_000),
        max_body_bytes: 1 << 20,
        max_code_bytes: 64,
        max_output_bytes: 1024,
        max_result_bytes: 1024,
        body_read_timeout: Duration::from_secs(1),
        files: crate::job::FileLimits {
            max_entries: 4,
            max_bytes: 100,
        },
        tools: crate::service::ToolGrants {
            default_call_timeout: Duration::from_millis(1_000),
            max: crate::job::tools::ToolLimits {
                call_timeout: Duration::from_millis(2_000),
                max_calls: 3,
                max_bytes: 100,
                wall_clock: Duration::from_secs(10),
            },
        },
    }
}

/// A service in front of `executor`, its audit log in `dir`, `quota` execs per caller.
fn service(
    executor: StubExecutor,
    dir: &tempfile::TempDir,
    quota: usize,
) -> (
    Service<StubExecutor>,
    Arc<StubExecutor>,
    Arc<ExecQuota>,
    std::path::PathBuf,
) {
    let executor = Arc::new(executor);
    let (audit, path) = log_in(dir, false);
    let quota = ExecQuota::new(BTreeMap::from([(Language::Javascript, quota)]), None);
    let service = Service::new(
        executor.clone(),
        Metrics::new().unwrap(),
        limits(),
        BTreeMap::new(),
    )
    .with_callers(Callers {
        access: Access::default(),
        quota: quota.clone(),
        audit: Arc::new(audit),
    });
    (service, executor, quota, path)
}

fn call() -> Call {
    Call {
        id: 7,
        caller: CALLER,
        received: Instant::now(),
        span: tracing::Span::none(),
        trace: crate::telemetry::Trace::off(),
    }
}

fn program(code: &str) -> Program {
    Program {
        timeout_ms: Some(2_000),
        ..Program::new(code)
    }
}

fn echo() -> StubExecutor {
    StubExecutor::new(|job| Ok(ok_outcome(&job.code, serde_json::json!(1))))
}

#[tokio::test]
async fn an_exec_runs_with_the_limits_granted_and_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (service, executor, _, audit) = service(echo(), &dir, 4);
    let executed = service
        .exec(&call(), Language::Javascript, program("6 * 7"))
        .await
        .unwrap();
    assert_eq!(executed.outcome.stdout, "6 * 7");
    assert!(executed.queued_ms >= 0.0 && executed.duration_ms == 3.0);
    let seen = executor.seen();
    let (language, code, left) = &seen[0];
    assert_eq!((*language, code.as_str()), (Language::Javascript, "6 * 7"));
    assert!(*left <= Duration::from_millis(2_000) && *left > Duration::from_millis(1_000));
    let [line] = lines(&audit).try_into().unwrap();
    assert_eq!(line["status"], "ok");
    assert_eq!(line["request_id"], 7);
}

#[tokio::test]
async fn an_executor_that_panics_is_an_internal_error_audited_and_its_slot_freed() {
    let dir = tempfile::tempdir().unwrap();
    let (service, _, _, audit) = service(StubExecutor::new(|_| panic!("broke")), &dir, 1);
    for _ in 0..2 {
        // With a cap of one, the second is admitted only if the first gave its slot back.
        let refused = service
            .exec(&call(), Language::Javascript, program("1"))
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Internal, "{refused:?}");
        assert!(
            refused.to_string().contains("the executor failed: broke"),
            "{refused}"
        );
    }
    let lines = lines(&audit);
    assert_eq!(lines.len(), 2);
    for line in lines {
        assert_eq!(line["error_kind"], "internal", "{line}");
    }
}

#[tokio::test]
async fn past_the_caller_s_cap_an_exec_is_refused_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (service, executor, quota, audit) = service(echo(), &dir, 1);
    let _held = quota
        .admit(&CALLER.principal(), Language::Javascript)
        .unwrap();
    let refused = service
        .exec(&call(), Language::Javascript, program("1"))
        .await
        .unwrap_err();
    assert!(matches!(refused, Refusal::OverQuota(_)), "{refused:?}");
    assert_eq!(refused.kind(), ErrorKind::QuotaExceeded);
    assert!(executor.seen().is_empty());
    let [line] = lines(&audit).try_into().unwrap();
    assert_eq!(
        (&line["status"], &line["error_kind"]),
        (&json("rejected"), &json("quota_exceeded"))
    );
}

#[tokio::test]
async fn a_program_its_policy_refuses_is_answered_as_a_policy_violation() {
    let dir = tempfile::tempdir().unwrap();
    // The executor answers as a runner does for a program naming what its policy refuses.
    let refusing = StubExecutor::new(|job| {
        let blocked = job.policy.as_ref().map(|p| p.blocked_globals.clone());
        assert_eq!(blocked, Some(vec!["eval".to_owned()]));
        let failure = Failure::new(FailureKind::PolicyViolation, "names eval");
        Ok(Outcome::failed(
            failure,
            String::new(),
            String::new(),
            false,
        ))
    });
    let (service, _, _, _) = service(refusing, &dir, 4);
    let service = service.with_code_policy(Policy {
        blocked_globals: vec!["eval".to_owned()],
        ..Policy::default()
    });
    let executed = service
        .exec(&call(), Language::Javascript, program("eval('1')"))
        .await
        .unwrap();
    assert_eq!(executed.outcome.status, Status::Error);
    let kind = executed.outcome.error.map(|e| e.kind);
    assert_eq!(kind, Some(FailureKind::PolicyViolation));
    // A request's policy with a rule of the other language is refused before anything runs.
    let mut foreign = program("1");
    foreign.policy = Some(Policy {
        allowed_modules: Some(vec!["json".to_owned()]),
        ..Policy::default()
    });
    let refused = service
        .exec(&call(), Language::Javascript, foreign)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidRequest, "{refused}");
}

#[tokio::test]
async fn a_session_exec_runs_in_the_caller_s_session_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (service, _, _, audit) = service(echo(), &dir, 4);
    let info = service
        .create_session(
            &call(),
            Language::Javascript,
            None,
            BTreeMap::new(),
            Default::default(),
        )
        .unwrap();
    let executed = service
        .session_exec(&call(), &info.id, program("x"))
        .await
        .unwrap();
    let session = executed.outcome.session.unwrap();
    assert_eq!(
        (session.id.as_str(), session.rolled_back),
        (info.id.as_str(), false)
    );
    assert_eq!(service.session(&call(), &info.id).unwrap().execs, 1);
    // Another caller's view: no such session.
    let other = Call {
        caller: Caller {
            uid: 2000,
            ..CALLER
        },
        ..call()
    };
    let refused = service
        .session_exec(&other, &info.id, program("x"))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::SessionNotFound);
    let events: Vec<String> = lines(&audit)
        .iter()
        .map(|line| line["audit"].as_str().unwrap().to_owned())
        .collect();
    // Another caller's exec was refused before it became one: no exec line.
    assert_eq!(events, ["session_created", "exec"]);
}

#[tokio::test]
async fn while_draining_new_work_is_refused_and_reads_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let (service, executor, _, _) = service(echo(), &dir, 4);
    let info = service
        .create_session(
            &call(),
            Language::Javascript,
            None,
            BTreeMap::new(),
            Default::default(),
        )
        .unwrap();
    service.drain();
    let refused = service
        .exec(&call(), Language::Javascript, program("1"))
        .await
        .unwrap_err();
    assert!(matches!(refused, Refusal::ShuttingDown));
    assert!(matches!(
        service.create_session(
            &call(),
            Language::Javascript,
            None,
            BTreeMap::new(),
            Default::default()
        ),
        Err(Refusal::ShuttingDown)
    ));
    assert!(matches!(
        service.session_exec(&call(), &info.id, program("1")).await,
        Err(Refusal::ShuttingDown)
    ));
    assert_eq!(service.sessions(&call(), BTreeMap::new()).unwrap().len(), 1);
    assert!(!service.health().ready());
    assert_eq!(service.health().status(), "stopping");
    assert!(executor.seen().is_empty());
}

#[tokio::test]
async fn files_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (service, executor, _, _) = service(echo(), &dir, 4);
    let with = |files: &[(&str, usize)]| {
        let mut program = program("1");
        program.files = files
            .iter()
            .map(|(path, size)| ((*path).to_owned(), vec![b'x'; *size]))
            .collect();
        program
    };
    for (files, kind) in [
        (vec![("../x", 1)], ErrorKind::InvalidRequest),
        (vec![("a", 1), ("a/b", 1)], ErrorKind::InvalidRequest),
        (vec![("a", 101)], ErrorKind::PayloadTooLarge),
        (vec![("a/b/c/d/e", 1)], ErrorKind::PayloadTooLarge),
    ] {
        let refused = service
            .exec(&call(), Language::Javascript, with(&files))
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), kind, "{files:?}: {refused}");
    }
    let code = program(&"x".repeat(65));
    let refused = service
        .exec(&call(), Language::Javascript, code)
        .await
        .unwrap_err();
    assert!(matches!(
        refused,
        Refusal::CodeTooLarge {
            size: 65,
            limit: 64
        }
    ));
    assert!(executor.seen().is_empty());
}

fn json(text: &str) -> serde_json::Value {
    serde_json::Value::String(text.to_owned())
}

#[tokio::test]
async fn a_network_is_refused_by_a_daemon_without_egress_and_narrowed_by_one_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (service, executor, _, _) = service(echo(), &dir, 4);
    let rule = |text: &str| crate::egress::rules::Rule::parse(text).unwrap();
    let asking = |rules: Vec<crate::egress::rules::Rule>| Program {
        network: Some(rules),
        ..program("1")
    };
    let refused = service
        .exec(
            &call(),
            Language::Javascript,
            asking(vec![rule("https://a.example.com")]),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidRequest);
    assert!(refused.to_string().contains("reach nothing"), "{refused}");
    assert!(executor.seen().is_empty(), "nothing ran");

    let options = crate::egress::options::EgressOptions {
        helper: None,
        allow: vec!["https://*.example.com".to_owned()],
        secrets: Vec::new(),
        ca_file: None,
        max_requests: 1,
        max_sent_bytes: 1,
        max_received_bytes: 1,
        timeout_ms: 1,
        max_redirects: 0,
        max_concurrent: 1,
    };
    let parts = options.parts(Vec::new(), &|_| None).unwrap().unwrap();
    let runtime = tokio::runtime::Handle::current();
    let audit = Arc::new(crate::audit::AuditLog::off());
    let egress = crate::egress::Egress::new(parts, runtime, audit, None);
    let service = service.with_egress(Some(egress));
    let wider = service
        .exec(
            &call(),
            Language::Javascript,
            asking(vec![rule("https://example.org")]),
        )
        .await
        .unwrap_err();
    assert!(wider.to_string().contains("only narrow"), "{wider}");
    service
        .exec(
            &call(),
            Language::Javascript,
            asking(vec![rule("https://a.example.com")]),
        )
        .await
        .unwrap();
    let health = service.health().egress.expect("egress in health");
    assert_eq!(health.rules, ["https://*.example.com"]);
}
