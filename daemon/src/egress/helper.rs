//! The egress helper (`hyperlightd-egress`): a process of its own that has the network and
//! nothing else (no hypervisor, no state, no secrets), for a daemon that has no network (the
//! packaged unit's `PrivateNetwork=yes`), as OpenSSH and Chromium split their privileges. It
//! answers two questions over a Unix socket only the daemon's user may open: the addresses a
//! name resolves to, and a TCP connection to one address, handed back as a descriptor
//! (`sys::passing`). The daemon keeps everything else: the rules, the address checks, TLS, the
//! secrets, the audit; it takes a connection only if its peer is the address it asked for.
//!
//! Whatever it is asked, the helper never connects to a link-local address (the clouds'
//! metadata services) or a multicast, broadcast or unspecified one.
//!
//! One question per connection, as a JSON line; one answer, as a JSON line (with the
//! connection's descriptor attached when it is one).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use crate::job::egress::{FetchError, FetchErrorKind};
use crate::sys::passing;
use crate::sys::seccomp::{self, Kind};

/// The longest question or answer line, in bytes.
pub const MAX_LINE: usize = 64 * 1024;
/// How long either side waits for the other's line.
pub const ASK_WAIT: Duration = Duration::from_secs(10);

/// What the daemon asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Question {
    /// Is the helper there, and which is it.
    Hello,
    /// The addresses `name` resolves to, with `port`.
    Resolve { name: String, port: u16 },
    /// A TCP connection to `address`, made within `timeout_ms`.
    Connect {
        address: SocketAddr,
        timeout_ms: u64,
    },
}

/// What the helper answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Hello {
        version: String,
    },
    Addresses(Vec<SocketAddr>),
    /// The connection is the descriptor sent with this line.
    Connected(SocketAddr),
    /// The helper never does this.
    Refused(String),
    /// It could not be done.
    Failed(String),
}

/// Why the helper never connects to `ip`, if it never does.
pub fn never(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
        IpAddr::V4(v4) if v4.is_multicast() || v4.is_broadcast() => Some("multicast or broadcast"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("multicast or broadcast"),
        ip if ip.is_unspecified() => Some("unspecified"),
        _ => None,
    }
}

/// The helper's answer to `question`, with the connection's descriptor when it made one.
pub fn answer(question: Question) -> (Answer, Option<OwnedFd>) {
    match question {
        Question::Hello => (
            Answer::Hello {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            None,
        ),
        Question::Resolve { name, port } => match (name.as_str(), port).to_socket_addrs() {
            Ok(found) => (Answer::Addresses(found.collect()), None),
            Err(e) => (Answer::Failed(format!("cannot resolve {name}: {e}")), None),
        },
        Question::Connect {
            address,
            timeout_ms,
        } => {
            if let Some(why) = never(address.ip()) {
                let refusal = format!(
                    "{} is {why}: the egress helper never connects there",
                    address.ip()
                );
                return (Answer::Refused(refusal), None);
            }
            let timeout = Duration::from_millis(timeout_ms.clamp(1, 600_000));
            match TcpStream::connect_timeout(&address, timeout) {
                Ok(tcp) => (Answer::Connected(address), Some(OwnedFd::from(tcp))),
                Err(e) => (
                    Answer::Failed(format!("cannot connect to {address}: {e}")),
                    None,
                ),
            }
        }
    }
}

/// Serves `listener` until it fails: each connection on a thread of its own, at most
/// `max_connections` at once (past them a connection is answered `failed` at once).
pub fn serve(listener: UnixListener, max_connections: usize) -> io::Error {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return e,
        };
        if open.fetch_add(1, Ordering::SeqCst) >= max_connections {
            open.fetch_sub(1, Ordering::SeqCst);
            let busy = Answer::Failed(format!(
                "the egress helper has {max_connections} connections open; try again"
            ));
            let _ = reply(&mut { stream }, &busy, None);
            continue;
        }
        let open = open.clone();
        let spawned = std::thread::Builder::new()
            .name("helper".to_owned())
            .spawn(move || {
                seccomp::name_this_thread(Kind::Egress);
                answer_connection(stream);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            warn!("cannot start a thread for a connection: {e}");
        }
    }
}

fn answer_connection(mut stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(ASK_WAIT));
    let _ = stream.set_write_timeout(Some(ASK_WAIT));
    let mut line = Vec::new();
    let read = BufReader::new(&stream)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line);
    let (answer, fd) = match read {
        Ok(0) => return,
        Ok(_) => match serde_json::from_slice::<Question>(&line) {
            Ok(question) => {
                debug!(?question, "asked");
                answer(question)
            }
            Err(e) => (Answer::Failed(format!("not a question: {e}")), None),
        },
        Err(e) => (Answer::Failed(format!("reading the question: {e}")), None),
    };
    if let Err(e) = reply(&mut stream, &answer, fd.as_ref()) {
        debug!("the answer could not be sent: {e}");
    }
}

fn reply(stream: &mut UnixStream, answer: &Answer, fd: Option<&OwnedFd>) -> io::Result<()> {
    let mut line = serde_json::to_vec(answer).map_err(io::Error::other)?;
    line.push(b'\n');
    passing::send_line(stream, &line, fd)?;
    stream.flush()
}

/// The daemon's side: asks the helper listening on `path`.
#[derive(Debug, Clone)]
pub struct Helper {
    path: PathBuf,
}

impl Helper {
    pub fn new(path: PathBuf) -> Helper {
        Helper { path }
    }

    /// The socket it listens on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its version, when it answers.
    pub fn hello(&self) -> Result<String, FetchError> {
        match self.ask(&Question::Hello)? {
            (Answer::Hello { version }, _) => Ok(version),
            (other, _) => Err(self.unexpected(&other)),
        }
    }

    /// The addresses `name` resolves to.
    pub fn resolve(&self, name: &str, port: u16) -> Result<Vec<SocketAddr>, FetchError> {
        let question = Question::Resolve {
            name: name.to_owned(),
            port,
        };
        match self.ask(&question)? {
            (Answer::Addresses(found), _) => Ok(found),
            (other, _) => Err(self.unexpected(&other)),
        }
    }

    /// A connection to `address`, checked to be one.
    pub fn connect(&self, address: SocketAddr, timeout: Duration) -> Result<TcpStream, FetchError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let question = Question::Connect {
            address,
            timeout_ms,
        };
        let (answer, fd) = self.ask(&question)?;
        let (Answer::Connected(to), Some(fd)) = (&answer, fd) else {
            return Err(self.unexpected(&answer));
        };
        let tcp = TcpStream::from(fd);
        match tcp.peer_addr() {
            Ok(peer) if peer == address && *to == address => Ok(tcp),
            Ok(peer) => Err(self.broken(format!(
                "it handed over a connection to {peer}, not to {address}"
            ))),
            Err(e) => Err(self.broken(format!("what it handed over is no connection: {e}"))),
        }
    }

    fn ask(&self, question: &Question) -> Result<(Answer, Option<OwnedFd>), FetchError> {
        let path = self.path.display();
        let mut stream = UnixStream::connect(&self.path).map_err(|e| {
            FetchError::new(
                FetchErrorKind::Failed,
                format!("the egress helper at {path} does not answer: {e}"),
            )
        })?;
        let asked = (|| {
            stream.set_read_timeout(Some(ASK_WAIT))?;
            stream.set_write_timeout(Some(ASK_WAIT))?;
            let mut line = serde_json::to_vec(question).map_err(io::Error::other)?;
            line.push(b'\n');
            stream.write_all(&line)?;
            passing::receive_line(&stream, MAX_LINE)
        })();
        let (line, fd) = asked.map_err(|e| self.broken(e.to_string()))?;
        let answer = serde_json::from_slice(&line)
            .map_err(|e| self.broken(format!("its answer is not one: {e}")))?;
        Ok((answer, fd))
    }

    fn unexpected(&self, answer: &Answer) -> FetchError {
        match answer {
            Answer::Refused(why) => FetchError::new(FetchErrorKind::Refused, why.clone()),
            Answer::Failed(why) => FetchError::new(FetchErrorKind::Failed, why.clone()),
            other => self.broken(format!("it answered {other:?}")),
        }
    }

    fn broken(&self, why: String) -> FetchError {
        FetchError::new(
            FetchErrorKind::Failed,
            format!("the egress helper at {}: {why}", self.path.display()),
        )
    }
}

#[cfg(test)]
#[path = "helper_tests.rs"]
mod tests;
