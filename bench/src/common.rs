//! What every part of the benchmark uses: latency figures, a daemon to measure, its metrics.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hyperlightd_client::{Client, ExecRequest, ExecResponse, ExecStatus};
use serde::{Deserialize, Serialize};

use crate::EXPECTED;

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl Latency {
    pub fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
        Latency {
            samples: samples.len(),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            mean_ms: samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64,
        }
    }
}

/// Means over (b)'s timed requests, from the daemon's histograms, in milliseconds.
#[derive(Debug, Default, Serialize)]
pub struct Breakdown {
    /// Arrival to the end of the execution, without the client and the socket.
    server_side_mean_ms: f64,
    /// Waiting for a sandbox.
    queue_wait_mean_ms: f64,
    /// Inside the guest.
    guest_call_mean_ms: f64,
    /// Restoring after the answer went out (off the request's path).
    restore_mean_ms: f64,
    /// Priming after the restore (Python; off the next request's path).
    prime_mean_ms: f64,
}

impl Breakdown {
    /// The means of what the daemon recorded between two scrapes, for series whose labels start
    /// with `labels` (empty for the first series of each name).
    pub fn between(before: &str, after: &str, labels: &str) -> Breakdown {
        let mean = |name: &str| {
            let (sum0, count0) = histogram_totals(before, name, labels);
            let (sum1, count1) = histogram_totals(after, name, labels);
            if count1 == count0 {
                return 0.0;
            }
            (sum1 - sum0) / (count1 - count0) * 1e3
        };
        Breakdown {
            server_side_mean_ms: mean("hyperlightd_execution_duration_seconds"),
            queue_wait_mean_ms: mean("hyperlightd_queue_wait_seconds"),
            guest_call_mean_ms: mean("hyperlightd_guest_call_seconds"),
            restore_mean_ms: mean("hyperlightd_sandbox_restore_seconds"),
            prime_mean_ms: mean("hyperlightd_sandbox_prime_seconds"),
        }
    }

    pub fn print(&self, label: &str) {
        println!(
            "    {label} inside the daemon, means: arrival to answer {:.3} ms = queue wait {:.3} + \
             guest call {:.3} + the daemon's own {:.3}; after the answer: restore {:.3}, prime {:.3}",
            self.server_side_mean_ms,
            self.queue_wait_mean_ms,
            self.guest_call_mean_ms,
            self.server_side_mean_ms - self.queue_wait_mean_ms - self.guest_call_mean_ms,
            self.restore_mean_ms,
            self.prime_mean_ms,
        );
    }
}

/// The sum and count of a Prometheus histogram: the first series of that name whose labels
/// start with `labels` (e.g. `{language="python"`, or empty for any).
pub fn histogram_totals(metrics: &str, name: &str, labels: &str) -> (f64, f64) {
    let value = |suffix: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_{suffix}{labels}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (value("sum"), value("count"))
}

/// A daemon on a temporary socket, killed when dropped.
#[derive(Debug)]
pub struct Daemon {
    pub child: Child,
    pub client: Client,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` starts of the daemon with `extra`, one after the other (each stopped before the next):
/// start to ready, each time.
pub async fn start_times(binary: &Path, extra: &[String], n: usize) -> Result<Latency> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let (_daemon, took) = start_daemon(binary, 1, extra).await?;
        samples.push(took);
    }
    Ok(Latency::of(samples))
}

/// Starts the daemon and returns it once ready, with the time that took.
pub async fn start_daemon(
    binary: &Path,
    pool: usize,
    extra: &[String],
) -> Result<(Daemon, Duration)> {
    start_daemon_logging(binary, pool, extra, None).await
}

/// [`start_daemon`], its log (JSON lines, info and up) written to `log` when given.
pub async fn start_daemon_logging(
    binary: &Path,
    pool: usize,
    extra: &[String],
    log: Option<&Path>,
) -> Result<(Daemon, Duration)> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("bench.sock");
    let mut command = Command::new(binary);
    // hyperlight-host logs every interrupted call as an error; the daemon reports what matters
    // itself.
    command.env(
        "HYPERLIGHTD_LOG",
        "warn,hyperlight_host=off,hyperlight_js=off",
    );
    if let Some(log) = log {
        let file = std::fs::File::create(log)?;
        command.stderr(file).args(["--log-format", "json"]).env(
            "HYPERLIGHTD_LOG",
            "info,hyperlight_host=off,hyperlight_js=off",
        );
    }
    let started = Instant::now();
    let child = command
        .arg("--socket")
        .arg(&socket)
        .args([
            "--pool",
            &format!("javascript={pool}"),
            "--queue-depth",
            "1024",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let mut daemon = Daemon {
        child,
        client: Client::connect(&socket),
        _dir: dir,
    };
    let mut said = 0;
    loop {
        if let Ok(health) = daemon.client.health().await
            && health.ready
        {
            return Ok((daemon, started.elapsed()));
        }
        // A line a minute: the benchmark's watch takes a VM silent for minutes for stalled.
        let minutes = started.elapsed().as_secs() / 60;
        if minutes > said {
            said = minutes;
            eprintln!("(the daemon is still starting: {minutes} min)");
        }
        if let Some(status) = daemon.child.try_wait()? {
            bail!("the daemon exited during startup ({status})");
        }
        // Under emulation a native Python pool of three builds its template and boots three
        // guests of a GiB: minutes.
        if started.elapsed() > READY_LIMIT {
            bail!(
                "the daemon was not ready within {} s",
                READY_LIMIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How long a daemon under test may take to be ready.
const READY_LIMIT: Duration = Duration::from_secs(600);

pub async fn exec_checked(client: &Client, request: &ExecRequest) -> Result<()> {
    check_answer(&client.exec(request).await?)
}

/// Whether `response` is the benchmark program's answer: ran to completion, with [`EXPECTED`].
pub fn check_answer(response: &ExecResponse) -> Result<()> {
    if response.status != ExecStatus::Ok || response.result != serde_json::json!(EXPECTED) {
        bail!("the daemon answered {response:?}");
    }
    Ok(())
}

/// Polls the daemon's health until every sandbox is idle: restored, primed, and not running
/// anything that would share the CPUs with the request about to be timed.
pub async fn wait_until_idle(client: &Client) -> Result<()> {
    wait_until_idle_every(client, Duration::from_millis(2)).await
}

/// [`wait_until_idle`], asking every `poll`.
pub async fn wait_until_idle_every(client: &Client, poll: Duration) -> Result<()> {
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let health = client.health().await?;
        if health.sandboxes.values().all(|c| c.ready == c.target) {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!("the daemon's sandboxes were not all idle after 30 s: {health:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

/// What [`concurrent`] measured.
pub struct Concurrent {
    /// Executions per second at the clients.
    pub per_s: f64,
    /// Each execution's time at its client.
    pub samples: Vec<Duration>,
    /// The machine's CPUs over the run.
    pub cpu: CpuUse,
}

/// `total` executions from `clients` clients at once, each sending its next as soon as its
/// last is answered, client `c`'s `i`-th being `requests[(c + i) % requests.len()]`, once the
/// sandboxes are idle.
pub async fn concurrent(
    client: &Client,
    requests: &[ExecRequest],
    clients: usize,
    total: usize,
) -> Result<Concurrent> {
    wait_until_idle(client).await?;
    let per_client = total / clients;
    let cpu = CpuClock::now()?;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let client = client.clone();
            let requests = requests.to_vec();
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(per_client);
                for i in 0..per_client {
                    let request = &requests[(c + i) % requests.len()];
                    let sent = Instant::now();
                    exec_checked(&client, request).await?;
                    samples.push(sent.elapsed());
                }
                anyhow::Ok(samples)
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(total);
    for task in tasks {
        samples.extend(task.await.context("a client task panicked")??);
    }
    let elapsed = started.elapsed();
    Ok(Concurrent {
        per_s: samples.len() as f64 / elapsed.as_secs_f64(),
        cpu: cpu.since(elapsed, samples.len())?,
        samples,
    })
}

/// The machine's CPU time so far, from the first line of `/proc/stat` (in the VM, its vCPUs as
/// its kernel saw them: busy includes the daemon, the guests, this benchmark and the kernel).
#[derive(Debug, Clone, Copy)]
pub struct CpuClock {
    busy: u64,
    total: u64,
    cpus: usize,
}

/// The CPUs between two [`CpuClock`] readings.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CpuUse {
    /// How many CPUs were busy, on average (at most the machine's CPUs).
    pub cpus_busy: f64,
    /// The machine's CPUs.
    pub cpus: usize,
    /// Busy CPU milliseconds per execution, everything on the machine counted.
    pub ms_per_execution: f64,
}

impl CpuClock {
    pub fn now() -> Result<CpuClock> {
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("cpu "))
            .context("/proc/stat has no \"cpu\" line")?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .context("/proc/stat's \"cpu\" line")?;
        if ticks.len() < 5 {
            bail!("/proc/stat's \"cpu\" line has {} fields", ticks.len());
        }
        // user nice system idle iowait irq softirq steal (guest time is inside user's).
        let total: u64 = ticks.iter().take(8).sum();
        let cpus = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
            .count();
        Ok(CpuClock {
            busy: total - ticks[3] - ticks[4],
            total,
            cpus,
        })
    }

    /// The CPUs from this reading to now, over `elapsed` and `executions`.
    pub fn since(self, elapsed: Duration, executions: usize) -> Result<CpuUse> {
        let now = CpuClock::now()?;
        let total = (now.total - self.total).max(1) as f64;
        let cpus_busy = (now.busy - self.busy) as f64 / total * self.cpus as f64;
        Ok(CpuUse {
            cpus_busy,
            cpus: self.cpus,
            ms_per_execution: cpus_busy * elapsed.as_secs_f64() * 1e3 / executions.max(1) as f64,
        })
    }
}

impl std::fmt::Display for CpuUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} of {} CPUs busy, {:.1} CPU ms per execution",
            self.cpus_busy, self.cpus, self.ms_per_execution
        )
    }
}

/// One latency row of the table.
/// The heading of [`print_row`]'s columns.
pub fn print_header() {
    println!(
        "{:<52} {:>10} {:>10} {:>10} {:>6}",
        "", "p50 ms", "p99 ms", "mean ms", "n"
    );
}

pub fn print_row(name: &str, l: &Latency) {
    println!(
        "{name:<52} {:>10.3} {:>10.3} {:>10.3} {:>6}",
        l.p50_ms, l.p99_ms, l.mean_ms, l.samples
    );
}

/// Daemon arguments for a Python pool of `size` running `guest`, then `extra`.
pub fn python_pool(guest: &Path, size: usize, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--pool".to_owned(),
        format!("python={size}"),
        "--python-guest".to_owned(),
        guest.to_string_lossy().into_owned(),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// The daemon's extra arguments for a part: `args.daemon_args`, after a Python pool of
/// `python` sandboxes when the benchmark was given a Python guest.
pub fn daemon_args(args: &crate::Args, python: usize) -> Vec<String> {
    match &args.python_guest {
        Some(guest) => python_pool(guest, python, &args.daemon_args),
        None => args.daemon_args.clone(),
    }
}

/// Times `request` once every sandbox of the daemon is idle (restored, primed): a warm
/// request, nothing else running beside it.
pub async fn warm_once(client: &Client, request: &ExecRequest) -> Result<Duration> {
    wait_until_idle(client).await?;
    let start = Instant::now();
    exec_checked(client, request).await?;
    Ok(start.elapsed())
}

/// `n` warm requests (see [`warm_once`]).
pub async fn warm(client: &Client, request: &ExecRequest, n: usize) -> Result<Latency> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        samples.push(warm_once(client, request).await?);
    }
    Ok(Latency::of(samples))
}

/// `n` requests sent back to back, each as soon as the last is answered, per second.
pub async fn back_to_back(client: &Client, request: &ExecRequest, n: usize) -> Result<f64> {
    wait_until_idle(client).await?;
    let start = Instant::now();
    for _ in 0..n {
        exec_checked(client, request).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The rate of runs measured apart, each (executions, executions per second), taken as one:
/// their executions over the time they took together.
pub fn rate_over(runs: impl IntoIterator<Item = (usize, f64)>) -> f64 {
    let (executions, seconds) = runs
        .into_iter()
        .fold((0, 0.0), |(n, t), (executions, per_s)| {
            (n + executions, t + executions as f64 / per_s)
        });
    executions as f64 / seconds
}

/// The mean of a histogram of the daemon's, in milliseconds (NaN when it has no samples).
pub fn mean_ms(metrics: &str, name: &str, labels: &str) -> f64 {
    let (sum, count) = histogram_totals(metrics, name, labels);
    if count > 0.0 {
        sum / count * 1e3
    } else {
        f64::NAN
    }
}

/// The `{language="..."` label prefix of a language's series.
pub fn language_label(language: hyperlightd_client::Language) -> String {
    format!("{{language=\"{}\"", language.as_str())
}

#[cfg(test)]
mod tests {
    use super::rate_over;

    #[test]
    fn a_rate_over_runs_weighs_each_by_its_time() {
        // 100 executions in 2 s and 100 in 1 s: 200 in 3 s, not the mean of 50 and 100.
        let rate = rate_over([(100, 50.0), (100, 100.0)]);
        assert!((rate - 200.0 / 3.0).abs() < 1e-9, "{rate}");
    }
}
