//! Streamed execs (issue 16): output arrives as the program writes it, in order, then the
//! response; caps hold; a client that goes away stops the program and frees its sandbox.

use std::time::Instant;

use hyperlightd_client::{ExecEvent, ExecStream};
use hyperlightd_e2e::metric;

use super::*;

/// The stream's events, each with when it arrived (from `started`, before the request).
async fn collect(started: Instant, mut stream: ExecStream) -> Vec<(Duration, ExecEvent)> {
    let mut events = Vec::new();
    while let Some(event) = within("next event", STEP_LIMIT, stream.next()).await {
        events.push((started.elapsed(), event.unwrap()));
    }
    events
}

#[tokio::test]
async fn output_arrives_while_the_program_runs_in_order_and_capped_in_both_languages() {
    let daemon = Daemon::start_with_python(&["javascript=1", "python=1"], &[]).await;
    let client = daemon.client();
    let programs = [
        (
            Language::Javascript,
            "console.log('first'); console.error('note');\n\
             await new Promise((r) => setTimeout(r, 2000));\nconsole.log('second'); 42",
        ),
        (
            Language::Python,
            "import sys, time\nprint('first')\nprint('note', file=sys.stderr)\ntime.sleep(2)\n\
             print('second')\n42",
        ),
    ];
    for (language, code) in programs {
        let started = Instant::now();
        let stream = client
            .exec_stream(&ExecRequest::new(language, code))
            .await
            .unwrap();
        let events = collect(started, stream).await;
        let texts: Vec<String> = events
            .iter()
            .filter_map(|(_, e)| match e {
                ExecEvent::Stdout { text } => Some(format!("out:{text}")),
                ExecEvent::Stderr { text } => Some(format!("err:{text}")),
                _ => None,
            })
            .collect();
        assert_eq!(
            texts,
            ["out:first\n", "err:note\n", "out:second\n"],
            "{language}"
        );
        let (ended, ExecEvent::Result(response)) = events.last().unwrap() else {
            panic!("{language}: the last event is the response: {events:?}");
        };
        assert_eq!(response.status, ExecStatus::Ok, "{language}: {response:?}");
        assert_eq!(
            (response.stdout.as_str(), &response.result),
            ("first\nsecond\n", &json!(42))
        );
        let first = events[0].0;
        eprintln!(
            "{language}: since the request, the first output after {first:?}, the response after {ended:?}"
        );
        assert!(
            *ended >= first + Duration::from_millis(1500),
            "{language}: the first output came {first:?} into the stream, not before the program's \
             two-second wait (the response came at {ended:?})"
        );
    }

    let flood = ExecRequest {
        max_output_bytes: Some(1000),
        ..ExecRequest::new(
            Language::Python,
            "for i in range(1000):\n    print('x' * 50)",
        )
    };
    let events = collect(Instant::now(), client.exec_stream(&flood).await.unwrap()).await;
    let streamed: usize = events
        .iter()
        .map(|(_, e)| match e {
            ExecEvent::Stdout { text } | ExecEvent::Stderr { text } => text.len(),
            _ => 0,
        })
        .sum();
    let Some((_, ExecEvent::Result(response))) = events.last() else {
        panic!("no response: {events:?}");
    };
    assert!(
        response.truncated && streamed <= 1000,
        "{streamed} bytes streamed"
    );
    assert_eq!(
        streamed,
        response.stdout.len(),
        "what streamed is what the response holds"
    );
}

#[tokio::test]
async fn a_client_that_goes_away_stops_the_program_and_frees_the_sandbox() {
    let daemon = Daemon::start(&["--pool", "javascript=1"]).await;
    let client = daemon.client();
    let taken = r#"hyperlightd_queue_wait_seconds_count{language="javascript"}"#;
    for code in ["console.log('looping'); for (;;) {}", "for (;;) {}"] {
        let before = daemon.metric(taken).await;
        let looping = ExecRequest {
            timeout_ms: Some(60_000),
            ..ExecRequest::new(Language::Javascript, code)
        };
        let handle = {
            let client = client.clone();
            tokio::spawn(async move {
                let mut stream = client.exec_stream(&looping).await.unwrap();
                stream.next().await
            })
        };
        if code.starts_with("console") {
            let first = within("the first event", STEP_LIMIT, handle).await.unwrap();
            assert!(
                matches!(first, Some(Ok(ExecEvent::Stdout { .. }))),
                "{first:?}"
            );
        } else {
            // Nothing will arrive: go away once the sandbox has taken the program.
            daemon
                .wait_for_metrics("the program reaches its sandbox", |metrics| {
                    metric(metrics, taken) > before
                })
                .await;
            handle.abort();
        }
        // The one sandbox is free again well before the loop's minute is up.
        let next = ExecRequest {
            timeout_ms: Some(20_000),
            ..ExecRequest::new(Language::Javascript, "'free'")
        };
        let answer = run(&daemon, next).await;
        assert_eq!(answer.result, json!("free"), "{code}: {answer:?}");
    }
}
