//! The pool's session jobs against fake guests: a job starts from its session's state, the
//! state it leaves is saved after the answer (or rolled back), and a sandbox that saved a
//! session's state runs that session's next exec without loading it.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_session_job_starts_from_its_state_and_the_state_it_leaves_is_saved_after_the_answer() {
    let (pool, _, _) = pool(2);
    let (first, after) = in_session(&pool, job("ok:1", 5_000), None).await;
    assert_eq!(first.result, serde_json::json!(1));
    let state = saved(after).await;
    // Any worker loads it; a fresh job on the same pool never sees it.
    for _ in 0..3 {
        let (next, after) = in_session(&pool, job("seen", 5_000), Some(state.clone())).await;
        assert_eq!(next.result, serde_json::json!(1), "one program ran before");
        assert_eq!(*saved(after).await.get::<usize>().unwrap(), 2);
        let fresh = submit(&pool, job("seen", 5_000)).await.unwrap();
        assert_eq!(fresh.result, serde_json::json!(0));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_job_that_poisons_its_sandbox_rolls_back_and_one_that_does_not_parse_changes_nothing()
 {
    let (pool, _, metrics) = pool(1);
    let (_, after) = in_session(&pool, job("ok:1", 5_000), None).await;
    let state = saved(after).await;
    let (spun, after) = in_session(&pool, job("spin", 100), Some(state.clone())).await;
    assert_eq!(spun.status, Status::Timeout);
    assert!(matches!(after, After::RolledBack("timeout")), "{after:?}");
    let (aborted, after) = in_session(&pool, job("abort", 5_000), Some(state.clone())).await;
    assert_eq!(aborted.error.unwrap().kind, FailureKind::SandboxFailure);
    assert!(
        matches!(after, After::RolledBack("guest_failure")),
        "{after:?}"
    );
    let (bad, after) = in_session(&pool, job("syntax", 5_000), Some(state.clone())).await;
    assert_eq!(bad.error.unwrap().kind, FailureKind::SyntaxError);
    assert!(matches!(after, After::Unchanged), "{after:?}");
    let (next, _) = in_session(&pool, job("seen", 5_000), Some(state)).await;
    assert_eq!(next.result, serde_json::json!(1));
    settle(&pool, 1).await;
    // The spin found the state still in the sandbox that saved it; the others loaded it (the
    // sandbox was restored after each that saved nothing).
    let series = |from: &str| {
        format!(r#"hyperlightd_session_resumes_total{{from="{from}",language="javascript"}}"#)
    };
    assert_eq!(metric(&pool, &metrics, &series("sandbox")), 1.0);
    assert_eq!(metric(&pool, &metrics, &series("snapshot")), 3.0);
    assert_eq!(
        metric(
            &pool,
            &metrics,
            r#"hyperlightd_session_load_seconds_count{language="javascript"}"#
        ),
        3.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_session_starts_from_the_warm_snapshot_not_from_what_priming_left() {
    let (pool, control, _) = pool(1);
    primed(&control, 1).await;
    let (first, after) = in_session(&pool, job("primed", 5_000), None).await;
    assert_eq!(first.result, serde_json::json!(false));
    assert_eq!(
        control.resets.load(Ordering::SeqCst),
        1,
        "restored on its path"
    );
    // Its next exec runs on as it left the sandbox; a plain job still finds one primed.
    let (next, _) = in_session(&pool, job("primed", 5_000), Some(saved(after).await)).await;
    assert_eq!(next.result, serde_json::json!(false));
    assert_eq!(control.resets.load(Ordering::SeqCst), 1);
    settle(&pool, 1).await;
    let fresh = submit(&pool, job("ok:1", 5_000)).await.unwrap();
    assert_eq!(fresh.status, Status::Ok);
    settle(&pool, 1).await;
    let plain = submit(&pool, job("primed", 5_000)).await.unwrap();
    assert_eq!(plain.result, serde_json::json!(true));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_that_saved_a_session_s_state_runs_its_next_exec_without_loading_it() {
    let (pool, control, metrics) = pool(1);
    let (_, after) = in_session(&pool, job("ok:1", 5_000), None).await;
    let state = saved(after).await;
    let resets = control.resets.load(Ordering::SeqCst);
    // The next exec of the session: nothing loaded, nothing restored, the state carried on.
    let (next, after) = in_session(&pool, job("seen", 5_000), Some(state.clone())).await;
    assert_eq!(next.result, serde_json::json!(1));
    let newer = saved(after).await;
    assert_eq!(
        control.resets.load(Ordering::SeqCst),
        resets,
        "kept, not restored"
    );
    // A fresh job gets a warm sandbox: the hot one is restored first, on its path.
    let fresh = submit(&pool, job("seen", 5_000)).await.unwrap();
    assert_eq!(fresh.result, serde_json::json!(0));
    assert!(control.resets.load(Ordering::SeqCst) > resets);
    // The session is loaded again then, from its newest state, which the sandbox dropped.
    let (again, _) = in_session(&pool, job("seen", 5_000), Some(newer)).await;
    assert_eq!(again.result, serde_json::json!(2));
    // An exec from an older state than the one the sandbox holds loads that state.
    let (older, _) = in_session(&pool, job("seen", 5_000), Some(state)).await;
    assert_eq!(older.result, serde_json::json!(1));
    settle(&pool, 1).await;
    let series = |from: &str| {
        format!(r#"hyperlightd_session_resumes_total{{from="{from}",language="javascript"}}"#)
    };
    assert_eq!(metric(&pool, &metrics, &series("sandbox")), 1.0);
    assert_eq!(metric(&pool, &metrics, &series("snapshot")), 2.0);
    assert_eq!(metric(&pool, &metrics, &series("warm")), 1.0);
}
