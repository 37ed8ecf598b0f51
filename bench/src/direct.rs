//! (a) hyperlight-js called in this process, the baseline of R1, and (c') its scaling.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use hyperlight_js::{LoadedJSSandbox, SandboxBuilder, Script, Snapshot};

use crate::common::{CpuClock, CpuUse, Latency};
use crate::{BODY, EXPECTED};

/// A sandbox with hyperlight-js's defaults and the program registered as the handler `bench`,
/// loaded, with the snapshot to restore it to.
fn bench_sandbox() -> Result<(LoadedJSSandbox, Arc<Snapshot>)> {
    let handler = format!(
        "function handler(event) {{ return {{ result: (() => {{ {} }})() }}; }}",
        BODY.replacen("JSON.stringify", "return JSON.stringify", 1)
    );
    let mut runtime = SandboxBuilder::new().build()?.load_runtime()?;
    runtime.add_handler("bench", Script::from_content(handler))?;
    let mut sandbox = runtime.get_loaded_sandbox()?;
    let snapshot = sandbox.snapshot()?;
    Ok((sandbox, snapshot))
}

/// (a): one sandbox, the program as a registered handler, called then restored each time.
pub fn direct(iterations: usize) -> Result<(Latency, Latency, Latency)> {
    let (mut sandbox, snapshot) = bench_sandbox()?;
    let (mut calls, mut restores, mut both) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations + 20 {
        let start = Instant::now();
        let reply = sandbox.handle_event("bench", "{}".to_owned(), Some(false))?;
        let called = Instant::now();
        sandbox.restore(snapshot.clone())?;
        let restored = Instant::now();
        if !reply.contains(EXPECTED) {
            bail!("direct call answered {reply}");
        }
        if i >= 20 {
            calls.push(called - start);
            restores.push(restored - called);
            both.push(restored - start);
        }
    }
    Ok((Latency::of(calls), Latency::of(restores), Latency::of(both)))
}

/// (c'): `threads` threads, each with its own sandbox, calling and restoring as fast as they
/// can: how far Hyperlight itself scales on this machine, without the daemon; and the CPUs it
/// kept busy.
pub fn direct_threads(threads: usize, requests: usize) -> Result<(f64, CpuUse)> {
    let per_thread = requests / threads;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || -> Result<()> {
                let (mut sandbox, snapshot) = bench_sandbox()?;
                barrier.wait();
                for _ in 0..per_thread {
                    sandbox.handle_event("bench", "{}".to_owned(), Some(false))?;
                    sandbox.restore(snapshot.clone())?;
                }
                Ok(())
            })
        })
        .collect();
    barrier.wait();
    let cpu = CpuClock::now()?;
    let start = Instant::now();
    for worker in workers {
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))??;
    }
    let elapsed = start.elapsed();
    Ok((
        (per_thread * threads) as f64 / elapsed.as_secs_f64(),
        cpu.since(elapsed, per_thread * threads)?,
    ))
}

/// (a'): hyperlightd's runner in a sandbox with the daemon's default sizes, called directly
/// with the program: the runner's own cost, without the daemon.
pub fn direct_runner(iterations: usize) -> Result<(Latency, Latency)> {
    // The daemon's default sizes: a 64 MiB heap, an input buffer that carries the runner when
    // it is registered, and scratch for both and the runtime's own memory.
    let heap: usize = 64 << 20;
    let input_buffer =
        (2 * hyperlightd::JAVASCRIPT_RUNNER.len() + (64 << 10)).next_multiple_of(4096);
    let mut proto = SandboxBuilder::new()
        .with_guest_heap_size(heap as u64)
        .with_guest_input_buffer_size(input_buffer)
        .with_guest_scratch_size(heap + input_buffer + (2 << 20) + (16 << 20))
        .build()?;
    proto.register("hyperlightd", "write", |_stream: u8, _text: String| true)?;
    let started = Instant::now();
    proto.register("hyperlightd", "now", move |_: u8| {
        started.elapsed().as_secs_f64() * 1e3
    })?;
    proto.register("hyperlightd", "sleep", |ms: f64| {
        std::thread::sleep(Duration::from_secs_f64(ms.clamp(0.0, 100.0) / 1e3));
    })?;
    proto.register("hyperlightd", "random", |bytes: usize| {
        "00".repeat(bytes.min(4096))
    })?;
    let mut runtime = proto.load_runtime()?;
    runtime.add_handler("run", Script::from_content(hyperlightd::JAVASCRIPT_RUNNER))?;
    let mut sandbox = runtime.get_loaded_sandbox()?;
    let snapshot = sandbox.snapshot()?;
    let event = serde_json::json!({
        "code": BODY,
        "max_result_bytes": 1 << 20,
        "seed": "0123456789abcdef0123456789abcdef",
    })
    .to_string();
    let mut calls = Vec::new();
    let mut restores = Vec::new();
    for i in 0..iterations + 20 {
        let start = Instant::now();
        let reply = sandbox.handle_event("run", event.clone(), Some(false))?;
        let called = start.elapsed();
        let restoring = Instant::now();
        sandbox.restore(snapshot.clone())?;
        if i >= 20 {
            restores.push(restoring.elapsed());
        }
        if !reply.contains(EXPECTED) {
            bail!("the runner answered {reply}");
        }
        if i >= 20 {
            calls.push(called);
        }
    }
    Ok((Latency::of(calls), Latency::of(restores)))
}
