//! The event both Python runners take for a request (guest/python/runner.py in the WebAssembly
//! guest, guest/python-native/hyperlightd_native.py in the native one): one shape, so that the
//! program code they share (guest/python/hyperlightd_program.py) sees the same request.

use serde::Serialize;

use crate::job::{Env, Files, Policy};
use crate::sandbox::guest::{Program, seed};

/// A request as a runner reads it.
#[derive(Serialize)]
pub struct Event<'a> {
    code: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'a Policy>,
    max_result_bytes: usize,
    /// 128 bits from the host's getrandom, in hex: the seed of the program's `random`.
    seed: String,
    /// Run the program in the session's globals.
    session: bool,
    /// Run the runner's priming program instead of `code`.
    prime: bool,
    /// The request's files, which the native runner fetches by index (the WebAssembly guest
    /// reads them through WASI: none are listed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files: Vec<FileEntry<'a>>,
    /// The tools the program may call: names and descriptions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<serde_json::Value>,
    /// The environment variables to set while the program runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<&'a Env>,
    /// Wheels to install before the program runs, which the native runner fetches by index.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    install: Vec<WheelEntry<'a>>,
}

#[derive(Serialize)]
struct WheelEntry<'a> {
    name: &'a str,
    version: &'a str,
    filename: &'a str,
    sha256: &'a str,
    size: usize,
}

#[derive(Serialize)]
struct FileEntry<'a> {
    path: &'a str,
    size: usize,
}

impl<'a> Event<'a> {
    /// The event that runs `program`.
    pub fn program(program: &Program<'a>, max_result_bytes: usize) -> Event<'a> {
        Event {
            code: program.code,
            policy: program.policy,
            max_result_bytes,
            seed: seed(),
            session: program.session,
            prime: false,
            files: Vec::new(),
            tools: program.tool_names(),
            env: Some(program.env).filter(|env: &&Env| !env.is_empty()),
            install: program
                .packages
                .iter()
                .map(|wheel| WheelEntry {
                    name: &wheel.name,
                    version: &wheel.version,
                    filename: &wheel.filename,
                    sha256: &wheel.sha256,
                    size: wheel.bytes.len(),
                })
                .collect(),
        }
    }

    /// The event that runs the runner's priming program.
    pub fn prime(max_result_bytes: usize) -> Event<'static> {
        Event {
            code: "",
            policy: None,
            max_result_bytes,
            seed: seed(),
            session: false,
            prime: true,
            files: Vec::new(),
            tools: Vec::new(),
            env: None,
            install: Vec::new(),
        }
    }

    /// The event, listing `files` by path and size.
    pub fn with_files(self, files: &'a Files) -> Event<'a> {
        let files = files
            .iter()
            .map(|(path, bytes)| FileEntry {
                path,
                size: bytes.len(),
            })
            .collect();
        Event { files, ..self }
    }
}
