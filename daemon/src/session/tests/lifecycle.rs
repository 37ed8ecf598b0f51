//! A session's exec through its whole lifecycle (`Sessions::exec`) around what a worker does:
//! a save that a fork waits for, the request's files over the session's and the caps, a caller
//! that goes away.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_fork_asked_while_a_save_runs_waits_for_it_and_copies_what_was_saved() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    exec_saving(&sessions, &id, 1, 10).await;
    // The next exec answers at once and saves for 500 ms; the fork is asked meanwhile.
    let slow = Duration::from_millis(500);
    exec_with_slow_save(&sessions, &id, 2, Duration::from_secs(5), slow)
        .await
        .unwrap();
    let asked = clock::now();
    let fork = sessions
        .fork(OWNER, &id, None, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(clock::since(asked) >= slow - Duration::from_millis(10));
    let fork = sessions.find(OWNER, &fork.id).unwrap();
    let history = fork.history.lock().await;
    assert_eq!(
        *history
            .head()
            .image()
            .unwrap()
            .state()
            .get::<u32>()
            .unwrap(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_sees_its_files_over_the_sessions_and_over_the_cap_nothing_runs() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    exec_saving(&sessions, &id, 7, 10).await;
    // The session holds state.txt; the job brings another file, and a new state.txt.
    let mine = Files::from([
        ("state.txt".to_owned(), b"mine".to_vec()),
        ("b.txt".to_owned(), b"b".to_vec()),
    ]);
    let (tx, saw) = oneshot::channel();
    let run = move |_state, seen: Job| async move {
        tx.send(seen.files).unwrap();
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    let deadline = clock::now() + Duration::from_secs(5);
    let first = job(2, deadline, Duration::from_secs(5), mine.clone());
    exec_job(&sessions, OWNER, &id, first, run).await.unwrap();
    assert_eq!(saw.await.unwrap(), mine);

    // Over the cap once laid over the session's: refused, nothing runs, the state is kept.
    let big = Files::from([("big.bin".to_owned(), vec![1u8; 1000])]);
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let run = move |_state, _job| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    let second = job(3, deadline, Duration::from_secs(5), big);
    let refused = exec_job(&sessions, OWNER, &id, second, run).await;
    assert!(
        matches!(refused, Err(ExecError::FilesOverCap(_))),
        "{refused:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let wait = Duration::from_secs(1);
    assert_eq!(sessions.files(OWNER, &id, wait).await.unwrap(), files_of(7));
}

#[tokio::test(start_paused = true)]
async fn file_changes_are_made_in_order_over_the_sessions_files_and_one_refused_changes_none() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    exec_saving(&sessions, &id, 7, 10).await;
    let deadline = clock::now() + Duration::from_secs(5);
    let write = |path: &str, text: &str| FileChange::Write {
        path: path.to_owned(),
        bytes: text.as_bytes().to_vec(),
    };
    let mut changing = job(2, deadline, Duration::from_secs(5), Files::new());
    changing.file_changes = vec![
        write("d/x", "x"),
        write("d/e/y", "y"),
        FileChange::Move {
            from: "state.txt".to_owned(),
            to: "d/e/s".to_owned(),
        },
        FileChange::Remove {
            path: "d/e".to_owned(),
        },
        write("state.txt", "new"),
    ];
    let (tx, saw) = oneshot::channel();
    let run = move |_state, seen: Job| async move {
        tx.send(seen.files).unwrap();
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    exec_job(&sessions, OWNER, &id, changing, run)
        .await
        .unwrap();
    let expected = Files::from([
        ("d/x".to_owned(), b"x".to_vec()),
        ("state.txt".to_owned(), b"new".to_vec()),
    ]);
    assert_eq!(saw.await.unwrap(), expected);

    // A change refused (the second: nothing at its path) refuses the first too; nothing runs.
    for (refused_at, error, changes) in [
        (
            "nope",
            FileError::NotFound,
            vec![
                write("a", "1"),
                FileChange::Remove {
                    path: "nope".into(),
                },
            ],
        ),
        (
            "state.txt/b",
            FileError::NotDirectory,
            vec![write("a", "1"), write("state.txt/b", "2")],
        ),
        (
            "big",
            FileError::TooLarge,
            vec![write("big", &"x".repeat(1001))],
        ),
    ] {
        let mut refused = job(3, deadline, Duration::from_secs(5), Files::new());
        refused.file_changes = changes;
        let run = |_state, _job| async { panic!("a refused change runs nothing") };
        let answer = exec_job(&sessions, OWNER, &id, refused, run).await;
        let Err(ExecError::FileRefused(why)) = answer else {
            panic!("{answer:?}");
        };
        assert_eq!((why.path.as_str(), why.error), (refused_at, error));
    }
    let wait = Duration::from_secs(1);
    assert_eq!(sessions.files(OWNER, &id, wait).await.unwrap(), files_of(7));
}

#[tokio::test(start_paused = true)]
async fn an_exec_whose_caller_goes_away_runs_to_its_end_and_its_state_is_kept() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    let (started, running) = oneshot::channel();
    let run = move |_state, _job| async move {
        started.send(()).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(saving(Some(9), 1))
    };
    let caller = {
        let (sessions, id) = (sessions.clone(), id.clone());
        tokio::spawn(async move {
            let deadline = clock::now() + Duration::from_secs(5);
            exec_with(&sessions, OWNER, &id, deadline, Duration::from_secs(5), run).await
        })
    };
    running.await.unwrap();
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    // The next exec waits for the first to end, and starts from the state it left.
    assert_eq!(exec_saving(&sessions, &id, 10, 1).await, Some(9));
}

#[tokio::test(start_paused = true)]
async fn a_job_sees_the_sessions_env_under_its_own_and_a_fork_keeps_the_sessions() {
    let env = |pairs: &[(&str, &str)]| {
        Env::new(
            pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        )
        .unwrap()
    };
    let sessions = sessions(settings());
    let session_env = env(&[("MODE", "session"), ("KEEP", "1")]);
    let id = sessions
        .create(
            OWNER,
            Language::Python,
            None,
            Labels::default(),
            session_env.clone(),
        )
        .unwrap()
        .id;
    assert_eq!(sessions.find(OWNER, &id).unwrap().info().env, session_env);
    let (tx, saw) = oneshot::channel();
    let run = move |_state, seen: Job| async move {
        tx.send(seen.env).unwrap();
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    let deadline = clock::now() + Duration::from_secs(5);
    let mut first = job(1, deadline, Duration::from_secs(5), Files::new());
    first.env = env(&[("MODE", "exec"), ("ONLY", "this exec")]);
    exec_job(&sessions, OWNER, &id, first, run).await.unwrap();
    let expected = env(&[("KEEP", "1"), ("MODE", "exec"), ("ONLY", "this exec")]);
    assert_eq!(saw.await.unwrap(), expected);

    // Together past the bounds: refused, nothing runs.
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let run = move |_state, _job| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    let mut big = job(2, deadline, Duration::from_secs(5), Files::new());
    let half = "x".repeat(crate::job::env::MAX_TOTAL_BYTES - 10);
    big.env = env(&[("BIG", &half)]);
    let refused = exec_job(&sessions, OWNER, &id, big, run).await;
    assert!(
        matches!(refused, Err(ExecError::EnvRefused(ref why)) if why.contains("bytes")),
        "{refused:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    let fork = sessions
        .fork(OWNER, &id, None, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(fork.env, session_env);
}

#[tokio::test(start_paused = true)]
async fn a_fresh_interpreter_starts_from_the_warm_state_with_the_sessions_files() {
    let sessions = sessions(settings());
    let id = create(&sessions, Language::Python).unwrap().id;
    exec_saving(&sessions, &id, 7, 10).await;
    let (tx, saw) = oneshot::channel();
    let run = move |state: Option<SavedState>, seen: Job| async move {
        tx.send((state.is_none(), seen.files)).unwrap();
        Ok(Ran {
            outcome: outcome(),
            after: After::Unchanged,
        })
    };
    let deadline = clock::now() + Duration::from_secs(5);
    let mut fresh = job(8, deadline, Duration::from_secs(5), Files::new());
    fresh.fresh_interpreter = true;
    exec_job(&sessions, OWNER, &id, fresh, run).await.unwrap();
    let (warm, files) = saw.await.unwrap();
    assert!(warm, "the warm state, not the session's");
    assert_eq!(files, *files_of(7), "the session's files");
}
