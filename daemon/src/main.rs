//! `hyperlightd`: parses the command line, sets up logging and the system call filters, runs
//! the daemon until SIGTERM or SIGINT, and maps failures to exit codes.

use std::process::ExitCode;

use hyperlightd::config::{Config, LogFormat, command_line};
use hyperlightd::sys::seccomp;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let config = match command_line::<Config>() {
        Ok(config) => config,
        Err(exit) => return exit,
    };
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

    // Before any other thread starts: reading them clears the variables that name them.
    let passed = match hyperlightd::sys::socket::Passed::from_env() {
        Ok(passed) => passed,
        Err(e) => {
            tracing::error!("socket activation: {e}");
            return ExitCode::from(64);
        }
    };
    // Before any other thread starts: each inherits the filter its creator has (see
    // hyperlightd::sys::seccomp).
    if let Err(e) = seccomp::start(&config.seccomp) {
        tracing::error!("system call filters: {e}");
        return ExitCode::from(70);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .thread_name("runtime")
        .on_thread_start(|| seccomp::enter_or_abort(seccomp::Kind::Runtime))
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hyperlightd: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let result = runtime.block_on(async {
        // From here on SIGTERM and SIGINT are stop requests, before anything slow starts.
        let stops = hyperlightd::sys::signals::stop_requests().map_err(|e| {
            hyperlightd::StartError::Other(format!("cannot install signal handlers: {e}"))
        })?;
        hyperlightd::run(config, passed, stops).await
    });
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
