//! `hlctl e2b-gateway`: E2B's API (the `hyperlightd-e2b` crate) on a TCP address, its requests
//! sent to the daemon's Unix socket with the client crate, so that the daemon sees this
//! process's own caller: its uid, or in Kubernetes its pod (a pod reaches the node's socket, not
//! the node's loopback, where `hyperlightd --e2b-listen` would serve).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hyperlightd_client::{
    Client, CreateSessionRequest, Error, ErrorKind, ExecEvent, ExecStream, FileChange, FileList,
    SessionExecRequest, SessionInfo,
};
use hyperlightd_e2b::{Account, Daemon, DaemonError, Events, Gateway};

/// `hlctl e2b-gateway`'s options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The TCP address to listen on. Loopback by default: anything that can reach it and has
    /// the key acts as you.
    #[arg(long, default_value = "127.0.0.1:49999")]
    listen: SocketAddr,
    /// A file whose first line is the key requests must carry (`E2B_API_KEY`). Without it, a
    /// key is made at start and printed on stderr.
    #[arg(long, value_name = "FILE", conflicts_with = "api_keys")]
    api_key_file: Option<PathBuf>,
    /// Serve several callers: a file of lines `NAME KEY`, each key acting for the caller NAME
    /// (letters, digits, `.`, `_`, `-`, `@`) for quotas, sandboxes and the audit log.
    ///
    /// The daemon must trust this gateway's user to act for others (`hyperlightd
    /// --delegate-uid`). The file must not be readable by group or others; blank lines and
    /// lines starting with `#` are skipped. Read at start: restart the gateway to change keys.
    #[arg(long, value_name = "FILE")]
    api_keys: Option<PathBuf>,
}

/// Serves E2B's API on `args.listen` until the process is stopped. An error: it could not
/// start (the key file, the address).
pub async fn serve(client: Client, args: Args) -> Result<(), String> {
    let accounts = accounts(client, &args).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    eprintln!(
        "hlctl e2b-gateway: E2B_API_URL=http://{0} E2B_SANDBOX_URL=http://{0}",
        args.listen
    );
    hyperlightd_e2b::serve(listener, Arc::new(Gateway::new(accounts))).await;
    Ok(())
}

/// The accounts `args` name: one of the gateway's own, or with `--api-keys` one per line of
/// the file, checked with the daemon before the gateway listens.
async fn accounts(client: Client, args: &Args) -> Result<Vec<Account<Socket>>, String> {
    let Some(path) = &args.api_keys else {
        let key = match &args.api_key_file {
            Some(path) => hyperlightd_e2b::read_key(path)?,
            None => {
                let key = hyperlightd_e2b::new_key()?;
                eprintln!("hlctl e2b-gateway: E2B_API_KEY={key}");
                key
            }
        };
        return Ok(vec![Account::new(key, Socket(client))]);
    };
    let keys = hyperlightd_e2b::read_keys(path)?;
    let accounts = keys
        .into_iter()
        .map(|(name, key)| Ok(Account::new(key, Socket(client.on_behalf_of(&name)?))))
        .collect::<Result<Vec<_>, String>>()?;
    // Every request of a delegate the daemon does not trust would be refused: say so now.
    if let Err(e) = accounts[0].daemon.0.health().await {
        let refused = matches!(&e, Error::Rejected { error, .. }
            if error.kind == ErrorKind::CallerNotAllowed);
        if refused {
            return Err(format!(
                "the daemon does not let this gateway act for others ({e}): start hyperlightd \
                 with --delegate-uid naming the user this gateway runs as"
            ));
        }
        eprintln!("hlctl e2b-gateway: the daemon could not be asked yet: {e}");
    }
    eprintln!(
        "hlctl e2b-gateway: {} keys from {}",
        accounts.len(),
        path.display()
    );
    Ok(accounts)
}

/// The daemon over its socket, acting for the client's caller.
pub struct Socket(Client);

/// A streamed exec's lines, read from the socket.
pub struct Lines(ExecStream);

fn refused(error: Error) -> DaemonError {
    match &error {
        Error::Rejected { error: body, .. } => DaemonError::refused(body.kind, error.to_string()),
        _ => DaemonError::unreachable(error.to_string()),
    }
}

impl Events for Lines {
    async fn next(&mut self) -> Option<Result<ExecEvent, DaemonError>> {
        self.0.next().await.map(|event| event.map_err(refused))
    }
}

impl Daemon for Socket {
    type Events = Lines;

    /// The same client: each of its calls is a request of the daemon's own, traced there.
    fn for_request(&self, _: &hyperlightd_e2b::Method, _: &str) -> Self {
        Socket(self.0.clone())
    }

    async fn create_session(
        &self,
        request: CreateSessionRequest,
    ) -> Result<SessionInfo, DaemonError> {
        self.0.create_session(&request).await.map_err(refused)
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, DaemonError> {
        self.0.session(id).await.map_err(refused)
    }

    async fn sessions_labelled(
        &self,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, DaemonError> {
        self.0.sessions_labelled(labels).await.map_err(refused)
    }

    async fn set_session_idle_timeout(&self, id: &str, seconds: u64) -> Result<(), DaemonError> {
        let set = self.0.set_session_idle_timeout(id, seconds).await;
        set.map(drop).map_err(refused)
    }

    async fn park_session(&self, id: &str) -> Result<(), DaemonError> {
        self.0.park_session(id).await.map(drop).map_err(refused)
    }

    async fn restart_session(&self, id: &str) -> Result<(), DaemonError> {
        self.0.restart_session(id).await.map(drop).map_err(refused)
    }

    async fn delete_session(&self, id: &str) -> Result<(), DaemonError> {
        self.0.delete_session(id).await.map_err(refused)
    }

    async fn session_exec(
        &self,
        id: &str,
        request: SessionExecRequest,
    ) -> Result<Lines, DaemonError> {
        let stream = self.0.session_exec_stream(id, &request).await;
        stream.map(Lines).map_err(refused)
    }

    async fn session_files(&self, id: &str) -> Result<FileList, DaemonError> {
        self.0.session_files(id).await.map_err(refused)
    }

    async fn change_session_files(
        &self,
        id: &str,
        changes: Vec<FileChange>,
    ) -> Result<(), DaemonError> {
        let changed = self.0.change_session_files(id, changes).await;
        changed.map(drop).map_err(refused)
    }

    async fn session_file(&self, id: &str, path: &str) -> Result<Vec<u8>, DaemonError> {
        self.0.session_file(id, path).await.map_err(refused)
    }
}
