//! `hlctl`: command-line client for hyperlightd.
//!
//! Exit status: 0 the program ran to completion; 1 the program failed (exception, syntax error,
//! sandbox failure), or for `health`, the daemon is not ready (not live, with `--live`); 2 bad
//! usage or unreadable input; 3 the program timed out; 4 the daemon refused the request; 5 the
//! daemon could not be reached (nothing was sent); 6 the request was sent but its answer was
//! lost or late (the program may have run).

#![forbid(unsafe_code)]

mod e2b;
mod files;
mod mcp;
mod session;
mod upstream;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hyperlightd_client::{
    Client, Error, ExecEvent, ExecResponse, ExecStatus, ExecStream, Language, SessionExecRequest,
    tool,
};

/// Exit codes, documented in the book (docs/guide/agents.md, "hlctl").
mod exit {
    pub const OK: u8 = 0;
    /// `hlctl health` only: the daemon answers but its pools are not at their size.
    pub const NOT_READY: u8 = 1;
    pub const PROGRAM_FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    pub const REJECTED: u8 = 4;
    pub const UNREACHABLE: u8 = 5;
    pub const LOST: u8 = 6;
}

#[derive(Debug, Parser)]
#[command(name = "hlctl", version, about = "Run code in hyperlightd's micro-VMs")]
struct Cli {
    /// The daemon's socket.
    #[arg(long, global = true, env = hyperlightd_client::SOCKET_ENV, default_value = hyperlightd_client::DEFAULT_SOCKET)]
    socket: PathBuf,

    /// Send the requests under this W3C traceparent (00-<trace id>-<span id>-<flags>), so that
    /// a daemon that traces puts its spans in your trace. TRACEPARENT is how CI systems and
    /// tracing wrappers hand a command its parent span.
    #[arg(long, global = true, env = "TRACEPARENT", value_name = "TRACEPARENT")]
    traceparent: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program: from -e, from FILE (language from its extension), or from stdin.
    Exec {
        /// Language: javascript (js) or python (py). Required with -e or stdin; taken from the
        /// extension of FILE (.js, .py).
        #[arg(long, short = 'l')]
        lang: Option<Language>,
        #[command(flatten)]
        program: ProgramArgs,
    },
    /// Print the daemon's health as JSON; exit 0 when it is ready (every pool at its size),
    /// 1 when it answers but is not.
    Health {
        /// Ask whether the daemon is alive instead: exit 0 while it works, warming or not; 1
        /// when a guest is stuck in the hypervisor and it needs a restart.
        #[arg(long)]
        live: bool,
    },
    /// Sessions: an interpreter whose state carries over from one program to the next.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Serve the run_code tool over the Model Context Protocol on stdin/stdout, for MCP hosts
    /// (agent frameworks, IDEs). Runs until the host closes stdin.
    Mcp {
        /// Characters of output (stdout, stderr and result together) a tool result keeps; the
        /// middle of longer output is cut, its start and end kept. At least 200.
        #[arg(
            long,
            value_name = "CHARS",
            default_value_t = tool::DEFAULT_OUTPUT_BUDGET,
            value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
                .range(tool::MIN_OUTPUT_BUDGET as u64..)
        )]
        output_budget: usize,
        /// Every call starts from a clean interpreter. Without it, the connection's calls keep
        /// state: one session per language, made on first use, deleted when the host closes
        /// the connection.
        #[arg(long)]
        fresh: bool,
        /// Code mode: a file of MCP servers (`{"mcpServers": {"name": {"command": ...,
        /// "args": [...], "env": {...}}}}`, as MCP hosts' configuration files) whose tools the
        /// programs may call, as functions `<name>_<tool>`.
        #[arg(long, value_name = "FILE")]
        servers: Option<std::path::PathBuf>,
        /// Code mode: one more MCP server, `NAME=COMMAND [ARG...]` (split at spaces). Repeat.
        #[arg(long = "server", value_name = "NAME=COMMAND")]
        server: Vec<String>,
    },
    /// Serve E2B's API on a TCP address, so that E2B's SDKs run unchanged against this
    /// daemon: set E2B_API_URL and E2B_SANDBOX_URL to the address, E2B_API_KEY to the key.
    /// The daemon can serve the same API itself (`hyperlightd --e2b-listen`), one exchange per
    /// request rather than two; this gateway is for callers who reach only its socket (pods).
    E2bGateway(e2b::Args),
}

fn main() -> ExitCode {
    // The reference page of the book (docs/reference/hlctl.md), rendered from these
    // definitions by `cargo xtask docs`; not in --help, which is for people.
    if std::env::args().nth(1).as_deref() == Some("--markdown-help") {
        let options = clap_markdown::MarkdownOptions::new()
            .title("hlctl".to_owned())
            .show_footer(false);
        print!(
            "<!-- Generated by `cargo xtask docs` from hlctl's clap definitions; do not edit. -->\n\n{}",
            clap_markdown::help_markdown_custom::<Cli>(&options)
        );
        return ExitCode::SUCCESS;
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hlctl: cannot start the async runtime: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let mut client = Client::connect(&cli.socket);
    if let Some(parent) = cli.traceparent.as_deref().filter(|p| !p.is_empty()) {
        client = match client.with_traceparent(parent) {
            Ok(client) => client,
            Err(message) => {
                eprintln!("hlctl: --traceparent: {message}");
                return ExitCode::from(exit::USAGE);
            }
        };
    }
    let code = runtime.block_on(async {
        match cli.command {
            Command::Exec { lang, program } => exec(&client, lang, program).await,
            Command::Health { live } => health(&client, live).await,
            Command::Session(command) => session::run(&client, command).await,
            Command::Mcp {
                output_budget,
                fresh,
                servers,
                server,
            } => match mcp_servers(servers.as_deref(), &server) {
                Err(message) => {
                    eprintln!("hlctl mcp: {message}");
                    exit::USAGE
                }
                Ok(servers) => match mcp::serve(client, output_budget, fresh, &servers).await {
                    Ok(()) => exit::OK,
                    Err(message) => {
                        eprintln!("hlctl mcp: {message}");
                        exit::USAGE
                    }
                },
            },
            Command::E2bGateway(args) => match e2b::serve(client, args).await {
                Ok(()) => exit::OK,
                Err(message) => {
                    eprintln!("hlctl e2b-gateway: {message}");
                    exit::USAGE
                }
            },
        }
    });
    ExitCode::from(code)
}

/// The MCP servers of code mode: the file's, then the flags' (a name given twice is an error).
fn mcp_servers(
    file: Option<&std::path::Path>,
    flags: &[String],
) -> Result<std::collections::BTreeMap<String, upstream::ServerSpec>, String> {
    let mut servers = match file {
        Some(path) => upstream::read_config(path)?,
        None => std::collections::BTreeMap::new(),
    };
    for flag in flags {
        let (name, spec) = upstream::parse_server_flag(flag)?;
        if servers.insert(name.clone(), spec).is_some() {
            return Err(format!("two MCP servers are named {name:?}"));
        }
    }
    Ok(servers)
}

/// Reads the program and decides its language.
fn program(
    lang: Option<Language>,
    code: Option<String>,
    file: Option<PathBuf>,
) -> Result<(Language, String), String> {
    let (text, guessed) = read_program(code, file)?;
    let language = lang.or(guessed).ok_or_else(|| {
        "cannot tell the program's language: pass --lang (e.g. --lang js)".to_owned()
    })?;
    Ok((language, text))
}

/// Reads the program from `code`, FILE or stdin; the language FILE's extension names, if any.
fn read_program(
    code: Option<String>,
    file: Option<PathBuf>,
) -> Result<(String, Option<Language>), String> {
    let from_stdin = || {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("reading the program from stdin: {e}"))?;
        Ok::<_, String>(text)
    };
    let (text, guessed) = match (code, file) {
        (Some(code), _) => (code, None),
        (None, Some(path)) if path.as_os_str() != "-" => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            let guessed = path
                .extension()
                .and_then(|e| e.to_str())
                .and_then(Language::from_extension);
            (text, guessed)
        }
        (None, _) => (from_stdin()?, None),
    };
    Ok((text, guessed))
}

/// A program and how to run it: what `exec` and `session exec` both take.
#[derive(Debug, Clone, clap::Args)]
struct ProgramArgs {
    /// The program text.
    #[arg(
        short = 'e',
        long = "eval",
        value_name = "CODE",
        conflicts_with = "file"
    )]
    code: Option<String>,
    #[command(flatten)]
    limits: Limits,
    /// Print the daemon's whole JSON response instead of the program's output.
    #[arg(long)]
    json: bool,
    /// File holding the program; `-` or nothing reads stdin.
    file: Option<PathBuf>,
}

/// The limits a request asks for, and its policy.
#[derive(Debug, Clone, clap::Args)]
struct Limits {
    /// Time limit in milliseconds (the daemon caps it; in a session, waiting for its earlier
    /// execs counts).
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Cap on the program's stdout and stderr together, in bytes (the daemon caps it).
    #[arg(long, value_name = "BYTES")]
    max_output_bytes: Option<usize>,
    /// Python: the only module the program may import (and its submodules); repeat for more.
    /// With any, relative imports and `__import__` are refused.
    #[arg(long, value_name = "MODULE")]
    allow_module: Vec<String>,
    /// Python: a function the program may not name (eval, exec, open, compile); repeatable.
    #[arg(long, value_name = "NAME")]
    block_function: Vec<String>,
    /// JavaScript: a global the program may not name (eval, Function); repeatable.
    #[arg(long, value_name = "NAME")]
    block_global: Vec<String>,
    /// A local file for the program's working directory, under its file name, or under NAME
    /// with NAME=PATH (`in/data.csv=./data.csv`); repeatable.
    #[arg(long, value_name = "[NAME=]PATH")]
    input: Vec<String>,
    /// Save the files the program wrote (created or changed) under DIR, and the images it
    /// showed (a matplotlib figure) as display-N.png.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// A destination the program may reach over HTTP, narrowing the daemon's egress rules:
    /// `[METHODS ]SCHEME://HOST[:PORT][/PATH]` (`GET https://api.example.com/v1/`);
    /// repeatable. Without it, the daemon's rules apply.
    #[arg(long, value_name = "RULE", value_parser = parse_rule, conflicts_with = "no_network")]
    allow: Vec<hyperlightd_client::AllowRule>,
    /// The program reaches nothing over HTTP, whatever the daemon allows.
    #[arg(long)]
    no_network: bool,
    /// An environment variable the program sees (`os.environ`, `process.env`); repeatable. In
    /// a session, for this exec only, over the session's own.
    #[arg(long, value_name = "NAME=VALUE", value_parser = env_var)]
    env: Vec<(String, String)>,
    /// Python: a package to install before the program runs (`NAME`, `NAME==VERSION`), from
    /// the daemon's package index; repeatable. In a session it stays for later execs.
    #[arg(long = "package", value_name = "REQUIREMENT")]
    packages: Vec<String>,
}

/// `NAME=VALUE`, as `--env` takes it (the daemon checks the name and the value).
pub(crate) fn env_var(given: &str) -> Result<(String, String), String> {
    match given.split_once('=') {
        Some((name, value)) => Ok((name.to_owned(), value.to_owned())),
        None => Err(format!("{given:?}: an environment variable is NAME=VALUE")),
    }
}

fn parse_rule(text: &str) -> Result<hyperlightd_client::AllowRule, String> {
    text.parse()
}

impl Limits {
    /// The policy the options ask for; None without any.
    fn policy(&self) -> Option<hyperlightd_client::Policy> {
        let policy = hyperlightd_client::Policy {
            allowed_modules: (!self.allow_module.is_empty()).then(|| self.allow_module.clone()),
            blocked_functions: self.block_function.clone(),
            blocked_globals: self.block_global.clone(),
        };
        (!policy.is_empty()).then_some(policy)
    }

    /// The network the options ask for; None (the daemon's rules) without any.
    fn network(&self) -> Option<hyperlightd_client::Network> {
        (self.no_network || !self.allow.is_empty()).then(|| hyperlightd_client::Network {
            allow: self.allow.clone(),
        })
    }
}

async fn exec(client: &Client, lang: Option<Language>, args: ProgramArgs) -> u8 {
    match program(lang, args.code, args.file) {
        Ok((language, text)) => {
            run_program(
                client,
                Target::Fresh(language),
                text,
                args.limits,
                args.json,
            )
            .await
        }
        Err(message) => {
            eprintln!("hlctl: {message}");
            exit::USAGE
        }
    }
}

/// Where a program runs: a fresh interpreter of a language, or a session's.
enum Target<'a> {
    Fresh(Language),
    Session(&'a str),
}

/// Runs `code` with `limits` in `target`: prints its output as it comes (with `json`, the
/// whole response at the end) and saves the files it wrote; the exit code says how it ended.
async fn run_program(
    client: &Client,
    target: Target<'_>,
    code: String,
    limits: Limits,
    json: bool,
) -> u8 {
    let files = match files::inputs(&limits.input) {
        Ok(files) => files,
        Err(message) => {
            eprintln!("hlctl: {message}");
            return exit::USAGE;
        }
    };
    let program = SessionExecRequest {
        policy: limits.policy(),
        network: limits.network(),
        timeout_ms: limits.timeout_ms,
        max_output_bytes: limits.max_output_bytes,
        files,
        env: limits.env.into_iter().collect(),
        packages: limits.packages,
        ..SessionExecRequest::new(code)
    };
    let answered = match (target, json) {
        (Target::Fresh(language), true) => client.exec(&program.with_language(language)).await,
        (Target::Fresh(language), false) => {
            let request = program.with_language(language);
            streamed(client.exec_stream(&request).await).await
        }
        (Target::Session(id), true) => client.session_exec(id, &program).await,
        (Target::Session(id), false) => {
            streamed(client.session_exec_stream(id, &program).await).await
        }
    };
    let response = match answered {
        Ok(response) => response,
        Err(e) => return report(&e),
    };
    if json {
        print_json(&response);
    } else {
        print_ending(&response);
        if let Some(session) = &response.session {
            session::report_exec(session);
        }
    }
    let output_dir = limits.output_dir.as_deref();
    let saved = files::save(&response.files, output_dir)
        .and_then(|()| files::save_display(&response.display, &response.files, output_dir));
    if let Err(message) = saved {
        eprintln!("hlctl: {message}");
        return exit::USAGE;
    }
    match response.status {
        ExecStatus::Ok => exit::OK,
        ExecStatus::Error => exit::PROGRAM_FAILED,
        ExecStatus::Timeout => exit::TIMEOUT,
    }
}

/// Prints `value` as pretty JSON.
fn print_json<T: serde::Serialize>(value: &T) -> u8 {
    match serde_json::to_string_pretty(value) {
        Ok(text) => {
            println!("{text}");
            exit::OK
        }
        Err(e) => {
            eprintln!("hlctl: {e}");
            exit::REJECTED
        }
    }
}

/// Prints a streamed program's output as it arrives, stdout to stdout and stderr to stderr;
/// the response once it has ended.
async fn streamed(opened: Result<ExecStream, Error>) -> Result<ExecResponse, Error> {
    opened?
        .finish(|event| match event {
            ExecEvent::Stdout { text } => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
            }
            ExecEvent::Stderr { text } => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            ExecEvent::Display { data, .. } => files::show(data),
            ExecEvent::Started { .. }
            | ExecEvent::ToolCall { .. }
            | ExecEvent::Result(_)
            | ExecEvent::Error { .. } => {}
        })
        .await
}

/// What follows a program's output: its result (when not null) as a JSON line on stdout, and a
/// last line on stderr saying why it failed.
fn print_ending(response: &ExecResponse) {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    if !response.result.is_null() {
        let _ = writeln!(out, "{}", response.result);
    }
    let _ = out.flush();
    if response.truncated {
        let _ = writeln!(err, "hlctl: output was truncated at the daemon's limit");
    }
    if let Some(error) = &response.error
        && !response.stderr.contains(&error.message)
    {
        let _ = writeln!(err, "hlctl: {}: {}", error.kind, error.message);
    }
}

async fn health(client: &Client, live: bool) -> u8 {
    match client.health().await {
        Ok(health) => match serde_json::to_string_pretty(&health) {
            Ok(text) => {
                println!("{text}");
                if (live && health.live) || (!live && health.ready) {
                    exit::OK
                } else {
                    exit::NOT_READY
                }
            }
            Err(e) => {
                eprintln!("hlctl: {e}");
                exit::REJECTED
            }
        },
        Err(e) => report(&e),
    }
}

fn report(error: &Error) -> u8 {
    eprintln!("hlctl: {error}");
    match error {
        Error::Unreachable { .. } => exit::UNREACHABLE,
        Error::ConnectionLost { .. } | Error::TimedOut { .. } => exit::LOST,
        Error::Rejected { .. } | Error::Protocol { .. } => exit::REJECTED,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[test]
    fn an_output_budget_below_the_minimum_is_refused() {
        let err = Cli::try_parse_from(["hlctl", "mcp", "--output-budget", "199"]).unwrap_err();
        assert!(err.to_string().contains("200"), "{err}");
        let cli = Cli::try_parse_from(["hlctl", "mcp", "--output-budget", "200"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Mcp {
                output_budget: 200,
                fresh: false,
                ..
            }
        ));
        let default = Cli::try_parse_from(["hlctl", "mcp"]).unwrap();
        assert!(matches!(
            default.command,
            Command::Mcp { output_budget, .. } if output_budget == tool::DEFAULT_OUTPUT_BUDGET
        ));
    }

    #[test]
    fn session_commands_parse_and_a_zero_idle_timeout_is_refused() {
        let cli = Cli::try_parse_from(["hlctl", "session", "new", "-l", "py"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Session(session::SessionCommand::New {
                lang: Language::Python,
                ..
            })
        ));
        let err = Cli::try_parse_from([
            "hlctl",
            "session",
            "new",
            "-l",
            "py",
            "--idle-timeout-s",
            "0",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("idle-timeout-s"), "{err}");
        let cli = Cli::try_parse_from(["hlctl", "session", "exec", "abc", "-e", "x = 1"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Session(session::SessionCommand::Exec { ref id, .. }) if id == "abc"
        ));
        assert!(
            Cli::try_parse_from(["hlctl", "session", "exec"]).is_err(),
            "an id is needed"
        );
    }

    #[test]
    fn checkpoint_commands_parse_and_a_checkpoint_is_a_number() {
        let cli = Cli::try_parse_from(["hlctl", "session", "rollback", "abc", "3"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Session(session::SessionCommand::Rollback { ref id, checkpoint: 3, json: false })
                if id == "abc"
        ));
        let cli =
            Cli::try_parse_from(["hlctl", "session", "fork", "abc", "--checkpoint", "2"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Session(session::SessionCommand::Fork {
                checkpoint: Some(2),
                ..
            })
        ));
        let cli = Cli::try_parse_from(["hlctl", "session", "checkpoints", "abc"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Session(session::SessionCommand::Checkpoints { .. })
        ));
        for bad in [
            &["hlctl", "session", "rollback", "abc", "-1"][..],
            &["hlctl", "session", "rollback", "abc", "two"],
            &["hlctl", "session", "rollback", "abc"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
