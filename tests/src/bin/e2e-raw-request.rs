//! Sends the raw HTTP request on stdin to the Unix socket named by its argument and writes the
//! answer, read to the end of the connection, to stdout: for tests that must call the daemon
//! as another user (run as that user with `Command::uid`), which a test process cannot become.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let Some(socket) = std::env::args_os().nth(1) else {
        eprintln!("usage: e2e-raw-request SOCKET < request");
        return ExitCode::FAILURE;
    };
    let run = || -> std::io::Result<Vec<u8>> {
        let mut request = Vec::new();
        std::io::stdin().read_to_end(&mut request)?;
        let mut stream = UnixStream::connect(&socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.write_all(&request)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        Ok(answer)
    };
    match run() {
        Ok(answer) => {
            let _ = std::io::stdout().write_all(&answer);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("e2e-raw-request: {e}");
            ExitCode::FAILURE
        }
    }
}
