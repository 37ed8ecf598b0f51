//! `hyperlightd`: parses the command line, sets up logging, runs the daemon until SIGTERM or
//! SIGINT, and maps failures to exit codes.

use std::process::ExitCode;

use clap::Parser;
use hyperlightd::config::{Config, LogFormat};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let config = Config::parse();
    let filter = EnvFilter::try_from_env("HYPERLIGHTD_LOG").unwrap_or_else(
        |_| // Hyperlight logs its own failures as raw VM errors; the daemon reports the ones
        // that matter itself, in terms an operator can act on.
        EnvFilter::new("info,hyperlight_host=off,hyperlight_js=off"),
    );
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hyperlightd: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let result = runtime.block_on(hyperlightd::run(config, stop_signal()));
    // A guest call or sandbox build stuck in the hypervisor must not keep the process alive:
    // its thread cannot be cancelled, so the runtime is not waited for past this.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Completes on the first SIGTERM or SIGINT.
async fn stop_signal() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the daemon with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
