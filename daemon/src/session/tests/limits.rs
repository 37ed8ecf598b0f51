//! The session table's rules around its callers and time: limits on sessions, idle timeouts
//! and the reaper, a session its creator's alone, per-caller quotas, and expiry in the audit
//! log.

use super::*;

#[tokio::test(start_paused = true)]
async fn limits_refuse_new_sessions_and_change_nothing_else() {
    let sessions = sessions(settings());
    let ids: Vec<String> = (0..4)
        .map(|_| create(&sessions, Language::Python).unwrap().id)
        .collect();
    assert!(matches!(
        create(&sessions, Language::Python),
        Err(ExecError::TooManySessions { limit: 4 })
    ));
    assert!(matches!(
        sessions
            .fork(OWNER, &ids[0], None, Duration::from_secs(1))
            .await,
        Err(ExecError::TooManySessions { .. })
    ));
    assert_eq!(sessions.list(OWNER, &Labels::default()).len(), 4);
    sessions.delete(OWNER, &ids[3]).unwrap();
    // Memory: one session holding the whole budget refuses the next.
    exec_saving(&sessions, &ids[0], 1, 1000).await;
    settled(&sessions, &ids[0]).await;
    assert!(matches!(
        create(&sessions, Language::Javascript),
        Err(ExecError::SessionMemoryFull {
            held: 1000,
            budget: 1000
        })
    ));
    assert_eq!(sessions.list(OWNER, &Labels::default()).len(), 3);
    // An exec in an existing session still runs.
    assert_eq!(exec_saving(&sessions, &ids[0], 2, 10).await, Some(1));
}

#[tokio::test(start_paused = true)]
async fn idle_timeouts_are_defaulted_capped_and_expired_sessions_are_reaped() {
    let sessions = sessions(SessionSettings {
        default_idle: Duration::from_millis(100),
        max_idle: Duration::from_millis(200),
        ..settings()
    });
    let short = create(&sessions, Language::Python).unwrap();
    let long = sessions
        .create(
            OWNER,
            Language::Python,
            Some(Duration::from_secs(3600)),
            Labels::default(),
            Default::default(),
        )
        .unwrap();
    assert_eq!(short.idle_timeout, Duration::from_millis(100));
    exec_saving(&sessions, &short.id, 1, 50).await;
    settled(&sessions, &short.id).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Expired: not found even before the reaper runs, and then gone with its memory.
    assert!(matches!(
        sessions.get(OWNER, &short.id),
        Err(ExecError::SessionNotFound(_))
    ));
    assert!(
        sessions.get(OWNER, &long.id).is_ok(),
        "capped at 200 ms, not yet over"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(sessions.reap(), 1);
    assert!(sessions.list(OWNER, &Labels::default()).is_empty());
    assert_eq!(sessions.counts()[&Language::Python].memory_bytes, 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_timeout_set_again_counts_from_then_is_capped_and_forks_keep_it() {
    let sessions = sessions(SessionSettings {
        default_idle: Duration::from_millis(100),
        max_idle: Duration::from_millis(1000),
        ..settings()
    });
    let id = create(&sessions, Language::Python).unwrap().id;
    exec_saving(&sessions, &id, 1, 10).await;
    settled(&sessions, &id).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    let set = sessions
        .set_idle_timeout(OWNER, &id, Duration::from_millis(300))
        .unwrap();
    assert_eq!(set.idle_timeout, Duration::from_millis(300));
    // Past the timeout it was created with, within the one set, counted from when it was set.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(sessions.get(OWNER, &id).is_ok());
    let capped = sessions
        .set_idle_timeout(OWNER, &id, Duration::from_secs(3600))
        .unwrap();
    assert_eq!(capped.idle_timeout, Duration::from_millis(1000));
    let wait = Duration::from_secs(1);
    let fork = sessions.fork(OWNER, &id, None, wait).await.unwrap();
    assert_eq!(fork.idle_timeout, Duration::from_millis(1000));
    let stranger = &Principal::Uid(1001);
    assert!(matches!(
        sessions.set_idle_timeout(stranger, &id, wait),
        Err(ExecError::SessionNotFound(_))
    ));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(matches!(
        sessions.get(OWNER, &id),
        Err(ExecError::SessionNotFound(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn the_reaper_runs_without_requests() {
    let sessions = sessions(SessionSettings {
        default_idle: Duration::from_millis(50),
        ..settings()
    });
    create(&sessions, Language::Javascript).unwrap();
    sessions.reap_every(
        Duration::from_millis(20),
        &tokio::runtime::Handle::current(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sessions.table().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_language_without_a_pool_has_no_sessions() {
    let metrics = Metrics::new().unwrap().sessions();
    let sessions = Sessions::new(settings(), &[Language::Javascript], metrics, audit_off());
    assert!(matches!(
        create(&sessions, Language::Python),
        Err(ExecError::LanguageNotServed(Language::Python))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_session_is_its_creators_alone_and_others_are_told_it_does_not_exist() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    // Another uid; with --pod-identity, another pod (whatever its uids), or the same uid
    // outside the pod that created it.
    let pod = Principal::Pod("pod-a".into());
    let id_of_pod = sessions
        .create(
            &pod,
            Language::Python,
            None,
            Labels::default(),
            Default::default(),
        )
        .unwrap()
        .id;
    for other in [&Principal::Uid(1001), &Principal::Pod("pod-b".into())] {
        assert!(sessions.get(other, &id_of_pod).is_err());
    }
    assert!(sessions.get(OWNER, &id_of_pod).is_err());
    assert!(sessions.get(&pod, &id).is_err());
    assert_eq!(sessions.list(&pod, &Labels::default()).len(), 1);
    sessions.delete(&pod, &id_of_pod).unwrap();
    let other = &Principal::Uid(1001);
    let not_found = |result: Result<SessionInfo, ExecError>| matches!(result, Err(ExecError::SessionNotFound(ref x)) if *x == id);
    assert!(not_found(sessions.get(other, &id)));
    assert!(not_found(
        sessions
            .fork(other, &id, None, Duration::from_secs(1))
            .await
    ));
    assert!(matches!(
        sessions.delete(other, &id),
        Err(ExecError::SessionNotFound(_))
    ));
    let wait = Duration::from_secs(1);
    assert!(matches!(
        sessions.checkpoints(other, &id, wait).await,
        Err(ExecError::SessionNotFound(_))
    ));
    assert!(not_found(sessions.rollback(other, &id, 0, wait).await));
    let run = |_: Option<SavedState>, _job| async {
        Err::<Ran, _>(ExecError::Internal("another caller's exec ran".into()))
    };
    let deadline = clock::now() + Duration::from_secs(5);
    assert!(matches!(
        exec_with(&sessions, other, &id, deadline, Duration::from_secs(5), run).await,
        Err(ExecError::SessionNotFound(_))
    ));
    assert!(sessions.list(other, &Labels::default()).is_empty());
    // The owner still has it, untouched.
    assert_eq!(sessions.list(OWNER, &Labels::default()).len(), 1);
    assert_eq!(sessions.get(OWNER, &id).unwrap().execs, 0);
    assert_eq!(sessions.delete(OWNER, &id).unwrap(), Language::Python);
}

#[tokio::test(start_paused = true)]
async fn each_caller_holds_at_most_its_quota_of_sessions_forks_included() {
    let sessions = sessions(SessionSettings {
        max_per_caller: 2,
        max_sessions: 8,
        default_idle: Duration::from_secs(30),
        ..settings()
    });
    let first = create(&sessions, Language::Python).unwrap().id;
    sessions
        .fork(OWNER, &first, None, Duration::from_secs(1))
        .await
        .unwrap();
    let over = create(&sessions, Language::Javascript).unwrap_err();
    let ExecError::SessionQuota {
        caller,
        limit,
        retry_after,
    } = over.clone()
    else {
        panic!("{over:?}");
    };
    assert_eq!((&caller, limit), (OWNER, 2));
    assert!(retry_after <= Duration::from_secs(30) && retry_after > Duration::from_secs(25));
    assert!(
        over.to_string().contains("--max-sessions-per-caller"),
        "{over}"
    );
    assert!(matches!(
        sessions
            .fork(OWNER, &first, None, Duration::from_secs(1))
            .await,
        Err(ExecError::SessionQuota { .. })
    ));
    // Another caller is not affected (another uid, a pod), and a deletion makes room.
    sessions
        .create(
            &Principal::Uid(1001),
            Language::Python,
            None,
            Labels::default(),
            Default::default(),
        )
        .unwrap();
    let pod = Principal::Pod("pod-a".into());
    for _ in 0..2 {
        sessions
            .create(
                &pod,
                Language::Python,
                None,
                Labels::default(),
                Default::default(),
            )
            .unwrap();
    }
    let pods_over = sessions
        .create(
            &pod,
            Language::Python,
            None,
            Labels::default(),
            Default::default(),
        )
        .unwrap_err();
    assert!(
        pods_over
            .to_string()
            .contains("this caller (pod pod-a) holds 2 sessions"),
        "{pods_over}"
    );
    sessions.delete(OWNER, &first).unwrap();
    create(&sessions, Language::Javascript).unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_daemons_own_user_is_held_to_no_session_quota() {
    let sessions = sessions(SessionSettings {
        max_per_caller: 1,
        exempt_uid: Some(1000),
        ..settings()
    });
    for _ in 0..3 {
        create(&sessions, Language::Python).unwrap();
    }
    sessions
        .create(
            &Principal::Uid(1001),
            Language::Python,
            None,
            Labels::default(),
            Default::default(),
        )
        .unwrap();
    assert!(matches!(
        sessions.create(
            &Principal::Uid(1001),
            Language::Python,
            None,
            Labels::default(),
            Default::default()
        ),
        Err(ExecError::SessionQuota { .. } | ExecError::TooManySessions { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn an_expiry_is_written_to_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let (audit, path) = crate::audit::testing::log_in(&dir, false);
    let audit = Arc::new(audit);
    let metrics = Metrics::new().unwrap().sessions();
    let settings = SessionSettings {
        default_idle: Duration::from_millis(10),
        ..settings()
    };
    let sessions = Sessions::new(settings, &[Language::Javascript], metrics, audit);
    let id = create(&sessions, Language::Javascript).unwrap().id;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(sessions.reap(), 1);
    let [line] = crate::audit::testing::lines(&path).try_into().unwrap();
    assert_eq!(line["audit"], "session_expired");
    assert_eq!(line["session"], id.as_str());
    assert_eq!(line["owner_uid"], 1000);
    assert_eq!(line["reason"], "idle");
}
