//! `hlctl session`: create, use, fork, list and delete sessions (an interpreter whose state
//! carries over from one exec to the next), list their checkpoints and roll them back.

use clap::Subcommand;
use hyperlightd_client::{
    CheckpointInfo, Client, CreateSessionRequest, ExecSession, Language, SessionInfo,
};

use super::{ProgramArgs, Target, exit, files, print_json, read_program, report, run_program};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session and print its id.
    New {
        /// The session's language.
        #[arg(long, short = 'l')]
        lang: Language,
        /// Seconds it may stay idle before the daemon deletes it (the daemon's default, and its
        /// cap, apply).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
        idle_timeout_s: Option<u64>,
        /// A label to find the session by later (`hlctl session ls --label`); repeatable.
        #[arg(long, value_name = "NAME=VALUE", value_parser = label)]
        label: Vec<(String, String)>,
        /// An environment variable every exec of the session sees (`os.environ`,
        /// `process.env`); repeatable. Its forks have it too.
        #[arg(long, value_name = "NAME=VALUE", value_parser = crate::env_var)]
        env: Vec<(String, String)>,
        /// Print the whole session as JSON instead of its id.
        #[arg(long)]
        json: bool,
    },
    /// Run a program in a session: from -e, from FILE, or from stdin. It sees everything the
    /// session's earlier programs defined.
    Exec {
        /// The session's id.
        id: String,
        #[command(flatten)]
        program: Box<ProgramArgs>,
    },
    /// Copy a session: print the id of a new session with the same state (or that of one of
    /// its checkpoints).
    Fork {
        /// The session to copy.
        id: String,
        /// The checkpoint to copy (see `hlctl session checkpoints`); its newest by default.
        #[arg(long, value_name = "N")]
        checkpoint: Option<u64>,
        /// Print the whole new session as JSON instead of its id.
        #[arg(long)]
        json: bool,
    },
    /// List a session's checkpoints, oldest first: number, the one it came from, size, whether
    /// it is on disk, when, and the request that made it. The last is the one the session is at.
    Checkpoints {
        /// The session's id.
        id: String,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Return a session to one of its checkpoints; the later ones are dropped (fork from the
    /// checkpoint instead to keep them).
    Rollback {
        /// The session's id.
        id: String,
        /// The checkpoint to return to.
        checkpoint: u64,
        /// Print the session as JSON afterwards.
        #[arg(long)]
        json: bool,
    },
    /// Park a session now: its state written to the daemon's state directory (`--state-dir`)
    /// and out of memory; its next exec brings it back.
    Park {
        /// The session's id.
        id: String,
        /// Print the session as JSON afterwards.
        #[arg(long)]
        json: bool,
    },
    /// Start a session's interpreter afresh, keeping its files and environment (a rollback to
    /// the checkpoint before undoes it).
    Restart {
        /// The session's id.
        id: String,
        /// Print the session as JSON afterwards.
        #[arg(long)]
        json: bool,
    },
    /// Install packages in a Python session, with what they need, from the daemon's package
    /// index (`--package-index`): `NAME` or `NAME==VERSION`, as pip takes them. They are
    /// importable from its next exec; a rollback to the checkpoint before removes them.
    Install {
        /// The session's id.
        id: String,
        /// The packages.
        #[arg(required = true)]
        requirements: Vec<String>,
        /// Print what was installed as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a session as JSON.
    Show {
        /// The session's id.
        id: String,
    },
    /// List the live sessions: id, language, execs, memory, where the state is (memory,
    /// durable, parked, lost), expiry.
    Ls {
        /// Only the sessions with this label; repeatable (all of them).
        #[arg(long, value_name = "NAME=VALUE", value_parser = label)]
        label: Vec<(String, String)>,
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the files in a session's working directory (size and path), or with PATH print
    /// that file's bytes; with --put, --mv or --rm, change them between execs (puts, then
    /// renames, then removals, all or none), printing the checkpoint the change made.
    Files {
        /// The session's id.
        id: String,
        /// A file's path in the working directory.
        #[arg(conflicts_with_all = ["put", "mv", "rm"])]
        path: Option<String>,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
        /// Write a local file into the working directory: PATH (under its file name) or
        /// NAME=PATH (under NAME, which may name directories). Repeatable.
        #[arg(long, value_name = "[NAME=]PATH")]
        put: Vec<String>,
        /// Rename FROM to TO in the working directory. Repeatable.
        #[arg(long, value_name = "FROM=TO")]
        mv: Vec<String>,
        /// Remove a file, or a directory with all it holds. Repeatable.
        #[arg(long, value_name = "PATH")]
        rm: Vec<String>,
    },
    /// Delete a session and its state.
    Rm {
        /// The session's id.
        id: String,
    },
}

/// `NAME=VALUE`, as `--label` takes it (the daemon checks the name and the value).
fn label(given: &str) -> Result<(String, String), String> {
    match given.split_once('=') {
        Some((name, value)) => Ok((name.to_owned(), value.to_owned())),
        None => Err(format!("{given:?}: a label is NAME=VALUE")),
    }
}

pub async fn run(client: &Client, command: SessionCommand) -> u8 {
    match command {
        SessionCommand::New {
            lang,
            idle_timeout_s,
            label,
            env,
            json,
        } => {
            let request = CreateSessionRequest {
                language: lang,
                idle_timeout_s,
                labels: label.into_iter().collect(),
                env: env.into_iter().collect(),
            };
            print_session(client.create_session(&request).await, json)
        }
        SessionCommand::Exec { id, program } => exec(client, &id, *program).await,
        SessionCommand::Fork {
            id,
            checkpoint,
            json,
        } => print_session(client.fork_session_at(&id, checkpoint).await, json),
        SessionCommand::Checkpoints { id, json } => match client.session_checkpoints(&id).await {
            Ok(checkpoints) if json => print_json(&checkpoints),
            Ok(checkpoints) => {
                println!("{}", checkpoint_table(&checkpoints));
                exit::OK
            }
            Err(e) => report(&e),
        },
        SessionCommand::Rollback {
            id,
            checkpoint,
            json,
        } => match client.rollback_session(&id, checkpoint).await {
            Ok(info) if json => print_json(&info),
            Ok(info) => {
                println!("session {} is at checkpoint {}", info.id, info.checkpoint);
                exit::OK
            }
            Err(e) => report(&e),
        },
        SessionCommand::Park { id, json } => match client.park_session(&id).await {
            Ok(info) if json => print_json(&info),
            Ok(info) if info.parked => {
                println!(
                    "session {} is parked at checkpoint {}",
                    info.id, info.checkpoint
                );
                exit::OK
            }
            Ok(info) => {
                println!(
                    "session {} has run nothing: there is nothing to park",
                    info.id
                );
                exit::OK
            }
            Err(e) => report(&e),
        },
        SessionCommand::Install {
            id,
            requirements,
            json,
        } => {
            let requirements: Vec<&str> = requirements.iter().map(String::as_str).collect();
            match client.install_packages(&id, &requirements).await {
                Ok(installed) if json => print_json(&installed),
                Ok(installed) => {
                    for p in &installed.installed {
                        let source = if p.cached { "cache" } else { "index" };
                        println!(
                            "installed {} {} ({}, from the {source})",
                            p.name, p.version, p.wheel
                        );
                    }
                    for p in &installed.present {
                        println!("already there: {} {}", p.name, p.version);
                    }
                    println!("session {id} at checkpoint {}", installed.checkpoint);
                    exit::OK
                }
                Err(e) => report(&e),
            }
        }
        SessionCommand::Restart { id, json } => match client.restart_session(&id).await {
            Ok(info) if json => print_json(&info),
            Ok(info) => {
                println!(
                    "session {} starts afresh at checkpoint {}, its files kept",
                    info.id, info.checkpoint
                );
                exit::OK
            }
            Err(e) => report(&e),
        },
        SessionCommand::Show { id } => print_session(client.session(&id).await, true),
        SessionCommand::Ls { label, json } => {
            match client.sessions_labelled(&label.into_iter().collect()).await {
                Ok(sessions) if json => print_json(&sessions),
                Ok(sessions) => {
                    println!("{}", table(&sessions));
                    exit::OK
                }
                Err(e) => report(&e),
            }
        }
        SessionCommand::Files {
            id,
            path,
            json,
            put,
            mv,
            rm,
        } => {
            if put.is_empty() && mv.is_empty() && rm.is_empty() {
                files::session_files(client, &id, path, json).await
            } else {
                files::change_session_files(client, &id, &put, &mv, rm).await
            }
        }
        SessionCommand::Rm { id } => match client.delete_session(&id).await {
            Ok(()) => exit::OK,
            Err(e) => report(&e),
        },
    }
}

fn print_session(answer: Result<SessionInfo, hyperlightd_client::Error>, json: bool) -> u8 {
    match answer {
        Ok(info) if json => print_json(&info),
        Ok(info) => {
            println!("{}", info.id);
            exit::OK
        }
        Err(e) => report(&e),
    }
}

async fn exec(client: &Client, id: &str, args: ProgramArgs) -> u8 {
    match read_program(args.code, args.file) {
        Ok((text, _)) => {
            let target = Target::Session(id);
            run_program(client, target, text, args.limits, args.json).await
        }
        Err(message) => {
            eprintln!("hlctl: {message}");
            exit::USAGE
        }
    }
}

/// The sessions as a table, one per line.
fn table(sessions: &[SessionInfo]) -> String {
    let mut lines = vec![format!(
        "{:<32}  {:<10}  {:>6}  {:>10}  {:<8}  {:<20}  LABELS",
        "ID", "LANGUAGE", "EXECS", "MEMORY", "STATE", "EXPIRES"
    )];
    for s in sessions {
        let labels: Vec<String> = s.labels.iter().map(|(n, v)| format!("{n}={v}")).collect();
        lines.push(format!(
            "{:<32}  {:<10}  {:>6}  {:>9.1}M  {:<8}  {:<20}  {}",
            s.id,
            s.language,
            s.execs,
            s.memory_bytes as f64 / f64::from(1 << 20),
            state(s),
            s.expires_at,
            labels.join(",")
        ));
    }
    lines.join("\n")
}

/// Where a session's state is: `lost`, `parked` (on disk only), `durable` (in memory and on
/// disk), or `memory` (a daemon without a state directory).
fn state(session: &SessionInfo) -> &'static str {
    if session.lost.is_some() {
        "lost"
    } else if session.parked {
        "parked"
    } else if session.durable {
        "durable"
    } else {
        "memory"
    }
}

/// The checkpoints as a table, one per line.
fn checkpoint_table(checkpoints: &[CheckpointInfo]) -> String {
    let mut lines = vec![format!(
        "{:>10}  {:>6}  {:>10}  {:<7}  {:<30}  {}",
        "CHECKPOINT", "PARENT", "SIZE", "ON DISK", "CREATED", "REQUEST"
    )];
    let or_dash = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    for c in checkpoints {
        lines.push(format!(
            "{:>10}  {:>6}  {:>9.1}M  {:<7}  {:<30}  {}",
            c.checkpoint,
            or_dash(c.parent),
            c.bytes as f64 / f64::from(1 << 20),
            if c.durable { "yes" } else { "no" },
            c.created_at,
            or_dash(c.request_id),
        ));
    }
    lines.join("\n")
}

/// What a session exec did to its session, on stderr when it is news: rolled back, or state
/// lost before it.
pub fn report_exec(session: &ExecSession) {
    if let Some(restored) = session.restored_from_checkpoint {
        eprintln!(
            "hlctl: the session lost the state of {} earlier exec(s): it came back at checkpoint \
             {restored}, and this program ran from there",
            session.lost_execs
        );
    }
    if session.rolled_back {
        eprintln!(
            "hlctl: the session was rolled back to its state before this program (checkpoint {})",
            session.checkpoint
        );
    }
}
