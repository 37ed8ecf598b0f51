//! Issue 16's item 5: a plain exec is no slower than before that features (files,
//! streamed output, a policy check) when none of them is used. This daemon runs side by side
//! with the daemon built from the revision before them (`--baseline-daemon`; `cargo xtask
//! bench` builds it), both with the same pools and guest; the two take turns in rounds, so
//! that the emulator's drift hits both alike. Then, on this daemon, what each feature costs a
//! request that uses it. With `--baseline-revision`, the same turns against a daemon built from
//! another revision, and nothing else.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyperlightd_client::{Client, ExecRequest, FileData, Language, Policy};
use serde_json::json;

use crate::common::{
    Latency, daemon_args, print_row, start_daemon, wait_until_idle, warm, warm_once,
};
use crate::targets::{PartReport, Target};
use crate::{Args, BODY, PYTHON_BODY};

/// Rounds of turns between the two daemons.
const ROUNDS: usize = 10;
/// How much slower than before a plain exec may be: within the noise of these runs.
const BOUND: f64 = 1.05;

pub async fn run(args: &Args) -> Result<PartReport> {
    let baseline = args
        .baseline_daemon
        .as_ref()
        .context("the baseline part needs --baseline-daemon (cargo xtask bench builds it)")?;
    let extra = daemon_args(args, 1);
    let (now, _) = start_daemon(&args.daemon, args.pool, &extra).await?;
    let (before, _) = start_daemon(baseline, args.pool, &extra).await?;
    let label = match &args.baseline_revision {
        None => {
            check_builds(&now.client, &before.client).await?;
            "before issue 16".to_owned()
        }
        Some(revision) => format!("at {revision}"),
    };

    let mut languages = vec![(Language::Javascript, BODY)];
    if args.python_guest.is_some() {
        languages.push((Language::Python, PYTHON_BODY));
    }
    println!("\n== 5: a plain exec, this daemon against the one {label} ==");
    let mut targets = Vec::new();
    let mut figures = serde_json::Map::new();
    for (language, body) in languages {
        let request = ExecRequest::new(language, body);
        let (this, previous) =
            turns(&now.client, &before.client, &request, args.iterations).await?;
        print_row(&format!("{language}: {label}"), &previous);
        print_row(&format!("{language}: this daemon"), &this);
        if args.baseline_revision.is_some() {
            println!(
                "{language}: this daemon / {label}: p50 {:.3} x, p99 {:.3} x",
                this.p50_ms / previous.p50_ms,
                this.p99_ms / previous.p99_ms
            );
            figures.insert(
                language.to_string(),
                json!({ "before": previous, "now": this }),
            );
            continue;
        }
        targets.push(Target::at_most(
            &format!("5 {language}"),
            &format!("{language} plain exec p50, this daemon / before issue 16"),
            this.p50_ms / previous.p50_ms,
            BOUND,
        ));
        let used = features(&now.client, language, body, args.iterations / 2).await?;
        figures.insert(
            language.to_string(),
            json!({ "before": previous, "now": this, "features": used }),
        );
    }
    Ok(PartReport {
        part: "baseline".into(),
        figures: serde_json::Value::Object(figures),
        targets,
    })
}

/// Refuses to compare a build with itself: only this daemon reports its file caps.
async fn check_builds(now: &Client, before: &Client) -> Result<()> {
    let files_cap = |health: hyperlightd_client::HealthResponse| health.limits.max_files;
    let (now, before) = (
        files_cap(now.health().await?),
        files_cap(before.health().await?),
    );
    if now == 0 || before != 0 {
        bail!(
            "--daemon should be this build (files cap {now}) and --baseline-daemon the one \
             before issue 16 (no files cap; it reports {before})"
        );
    }
    Ok(())
}

/// `iterations` warm requests on each daemon, in turns: a round on one, a round on the other,
/// the order swapped every round. Each round starts with both daemons idle: a daemon restores
/// (and, if it primes, primes) after its last answer, and that work must not fall on the other
/// daemon's first request of the round (it did: the one that primes less showed a fatter p99).
async fn turns(
    now: &Client,
    before: &Client,
    request: &ExecRequest,
    iterations: usize,
) -> Result<(Latency, Latency)> {
    warm(now, request, 10).await?;
    warm(before, request, 10).await?;
    let per_round = iterations.div_ceil(ROUNDS);
    let (mut this, mut previous) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for first in [round % 2 == 0, round % 2 == 1] {
            let (client, samples) = match first {
                true => (now, &mut this),
                false => (before, &mut previous),
            };
            wait_until_idle(now).await?;
            wait_until_idle(before).await?;
            for _ in 0..per_round {
                samples.push(warm_once(client, request).await?);
            }
        }
    }
    Ok((Latency::of(this), Latency::of(previous)))
}

/// What using each feature costs a warm request on this daemon: plain, streamed, with a policy
/// that does not refuse it, with one small file.
async fn features(
    client: &Client,
    language: Language,
    body: &str,
    n: usize,
) -> Result<serde_json::Value> {
    let plain = ExecRequest::new(language, body);
    let policy = match language {
        Language::Python => Policy {
            blocked_functions: vec!["eval".into()],
            ..Policy::default()
        },
        Language::Javascript => Policy {
            blocked_globals: vec!["eval".into()],
            ..Policy::default()
        },
    };
    let checked = ExecRequest {
        policy: Some(policy),
        ..plain.clone()
    };
    let with_file = ExecRequest {
        files: [("data.csv".to_owned(), FileData::Text("n\n1\n".repeat(50)))].into(),
        ..plain.clone()
    };
    let plain_latency = warm(client, &plain, n).await?;
    let checked_latency = warm(client, &checked, n).await?;
    let file_latency = warm(client, &with_file, n).await?;
    let streamed_latency = streamed(client, &plain, n).await?;
    print_row(&format!("{language}: plain (this daemon)"), &plain_latency);
    print_row(&format!("{language}: streamed"), &streamed_latency);
    print_row(&format!("{language}: with a policy"), &checked_latency);
    print_row(&format!("{language}: with a 200-byte file"), &file_latency);
    Ok(json!({
        "plain": plain_latency,
        "streamed": streamed_latency,
        "policy": checked_latency,
        "file": file_latency,
    }))
}

/// `n` warm streamed requests, each timed to its last event.
async fn streamed(client: &Client, request: &ExecRequest, n: usize) -> Result<Latency> {
    let mut samples: Vec<Duration> = Vec::with_capacity(n);
    for _ in 0..n {
        crate::common::wait_until_idle(client).await?;
        let start = Instant::now();
        let response = client.exec_stream(request).await?.finish(|_| {}).await?;
        samples.push(start.elapsed());
        if response.result != json!(crate::EXPECTED) {
            bail!("the streamed exec answered {response:?}");
        }
    }
    Ok(Latency::of(samples))
}
