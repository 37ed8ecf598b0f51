//! Refill: what a sandbox costs once a program has poisoned it (a time limit, a memory bomb),
//! against building a language's sandbox from scratch.
//!
//! From scratch is the template (runtime loaded, runner ready, snapshotted), once per pool: the
//! daemon's `hyperlightd_sandbox_template_seconds`. A poisoned sandbox is restored to the
//! template and primed; timed here from the poisoning request's answer until the daemon reports
//! every sandbox idle again. Should the restore fail, the sandbox is replaced by a new one from
//! the template: `hyperlightd_sandbox_create_seconds` (every sandbox of the pool is built so).

use std::time::Instant;

use anyhow::{Result, bail};
use hyperlightd_client::{Client, ExecRequest, ExecStatus, Language};
use serde_json::json;

use crate::Args;
use crate::common::{
    Latency, daemon_args, language_label, mean_ms, print_row, start_daemon, wait_until_idle,
};
use crate::targets::{PartReport, Target};

/// Poisonings timed per kind and language.
const ROUNDS: usize = 5;

/// Programs that poison their sandbox, by language: (kind, program).
fn poisons(language: Language) -> [(&'static str, &'static str); 2] {
    match language {
        Language::Javascript => [
            ("time limit", "while (true) {}"),
            (
                "memory bomb",
                "const a = []; while (true) a.push(new Array(1 << 20).fill(7));",
            ),
        ],
        Language::Python => [
            ("time limit", "while True:\n    pass"),
            (
                "memory bomb",
                "a = []\nwhile True:\n    a.append(bytearray(1 << 20))",
            ),
        ],
    }
}

pub async fn run(args: &Args) -> Result<PartReport> {
    let mut languages = vec![Language::Javascript];
    if args.python_guest.is_some() {
        languages.push(Language::Python);
    }
    let (daemon, _) = start_daemon(&args.daemon, 2, &daemon_args(args, 2)).await?;
    wait_until_idle(&daemon.client).await?;
    println!("\n== Refill: a poisoned sandbox against one built from scratch ==");
    let mut targets = Vec::new();
    let mut figures = serde_json::Map::new();
    for language in languages {
        let metrics = daemon.client.metrics().await?;
        let label = language_label(language);
        let template = mean_ms(&metrics, "hyperlightd_sandbox_template_seconds", &label);
        let create = mean_ms(&metrics, "hyperlightd_sandbox_create_seconds", &label);
        println!(
            "{language}: template from scratch {template:.1} ms; a sandbox from the template {create:.1} ms (mean)"
        );
        let mut worst = 0.0_f64;
        let mut kinds = serde_json::Map::new();
        for (kind, program) in poisons(language) {
            eprintln!("(refill) {language}, {kind} ...");
            let back = back_in_service(&daemon.client, language, program).await?;
            print_row(
                &format!("{language}: back in service after a {kind}"),
                &back,
            );
            worst = worst.max(back.p50_ms);
            kinds.insert(kind.into(), serde_json::to_value(&back)?);
        }
        targets.push(Target::at_most(
            &format!("Refill {language}"),
            "poisoned sandbox back in service p50 (worst kind) / template build",
            worst / template,
            0.05,
        ));
        targets.push(Target::at_most(
            &format!("Replace {language}"),
            "new sandbox from the template / template build (means)",
            create / template,
            0.05,
        ));
        figures.insert(
            language.as_str().into(),
            json!({ "template_ms": template, "create_ms": create, "back_in_service": kinds }),
        );
    }
    Ok(PartReport {
        part: "refill".into(),
        figures: figures.into(),
        targets,
    })
}

/// Sends `program` [`ROUNDS`] times, and times each from its answer until every sandbox is
/// idle again.
async fn back_in_service(client: &Client, language: Language, program: &str) -> Result<Latency> {
    let mut request = ExecRequest::new(language, program);
    request.timeout_ms = Some(1000);
    let mut samples = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        wait_until_idle(client).await?;
        let response = client.exec(&request).await?;
        let answered = Instant::now();
        if response.status == ExecStatus::Ok {
            bail!("{program:?} was meant to poison its sandbox, and answered {response:?}");
        }
        wait_until_idle(client).await?;
        samples.push(answered.elapsed());
    }
    Ok(Latency::of(samples))
}
