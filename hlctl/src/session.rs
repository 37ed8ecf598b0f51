//! `hlctl session`: create, use, fork, list and delete sessions (an interpreter whose state
//! carries over from one exec to the next).

use clap::Subcommand;
use hyperlightd_client::{Client, CreateSessionRequest, Language, SessionInfo};

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
    /// Copy a session: print the id of a new session with the same state.
    Fork {
        /// The session to copy.
        id: String,
        /// Print the whole new session as JSON instead of its id.
        #[arg(long)]
        json: bool,
    },
    /// Print a session as JSON.
    Show {
        /// The session's id.
        id: String,
    },
    /// List the live sessions: id, language, execs, memory, expiry.
    Ls {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the files in a session's working directory (size and path), or with PATH print
    /// that file's bytes.
    Files {
        /// The session's id.
        id: String,
        /// A file's path in the working directory.
        path: Option<String>,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a session and its state.
    Rm {
        /// The session's id.
        id: String,
    },
}

pub async fn run(client: &Client, command: SessionCommand) -> u8 {
    match command {
        SessionCommand::New {
            lang,
            idle_timeout_s,
            json,
        } => {
            let request = CreateSessionRequest {
                language: lang,
                idle_timeout_s,
            };
            print_session(client.create_session(&request).await, json)
        }
        SessionCommand::Exec { id, program } => exec(client, &id, *program).await,
        SessionCommand::Fork { id, json } => print_session(client.fork_session(&id).await, json),
        SessionCommand::Show { id } => print_session(client.session(&id).await, true),
        SessionCommand::Ls { json } => match client.sessions().await {
            Ok(sessions) if json => print_json(&sessions),
            Ok(sessions) => {
                println!("{}", table(&sessions));
                exit::OK
            }
            Err(e) => report(&e),
        },
        SessionCommand::Files { id, path, json } => {
            files::session_files(client, &id, path, json).await
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
        "{:<32}  {:<10}  {:>6}  {:>10}  {}",
        "ID", "LANGUAGE", "EXECS", "MEMORY", "EXPIRES"
    )];
    for s in sessions {
        lines.push(format!(
            "{:<32}  {:<10}  {:>6}  {:>9.1}M  {}",
            s.id,
            s.language,
            s.execs,
            s.memory_bytes as f64 / f64::from(1 << 20),
            s.expires_at
        ));
    }
    lines.join("\n")
}
