//! A line with a file descriptor attached, over a Unix stream socket (`SCM_RIGHTS`): how the
//! egress helper hands the daemon a TCP connection it made, so that the daemon itself needs no
//! network.
// The one unsafe step: a descriptor the kernel just gave this process becomes an `OwnedFd`.
#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, UnixAddr, recvmsg, sendmsg};

/// Sends `line` (which ends with a newline) with `fd` attached to its first byte.
pub fn send_line(stream: &mut UnixStream, line: &[u8], fd: Option<&OwnedFd>) -> io::Result<()> {
    let Some(fd) = fd else {
        return stream.write_all(line);
    };
    let fds = [fd.as_fd().as_raw_fd()];
    let message = [ControlMessage::ScmRights(&fds)];
    let sent = sendmsg::<UnixAddr>(
        stream.as_raw_fd(),
        &[IoSlice::new(line)],
        &message,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    // The descriptor went with the first bytes; the rest of a long line follows plainly.
    stream.write_all(&line[sent..])
}

/// Reads one line (at most `max` bytes, newline included) and the descriptor sent with it, if
/// any (more than one: the others are closed).
pub fn receive_line(stream: &UnixStream, max: usize) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
    let mut line = Vec::new();
    let mut passed = None;
    let mut chunk = [0u8; 1024];
    while !line.ends_with(b"\n") {
        if line.len() >= max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a line over {max} bytes"),
            ));
        }
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
        let take = chunk.len().min(max - line.len());
        let mut iov = [IoSliceMut::new(&mut chunk[..take])];
        let received = recvmsg::<UnixAddr>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        for message in received.cmsgs()? {
            if let ControlMessageOwned::ScmRights(fds) = message {
                for fd in fds {
                    // SAFETY: the kernel just installed `fd` in this process for this message;
                    // nothing else owns it.
                    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                    if passed.is_none() {
                        passed = Some(owned);
                    }
                }
            }
        }
        let n = received.bytes;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection before a whole line",
            ));
        }
        line.extend_from_slice(&chunk[..n]);
    }
    Ok((line, passed))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek};

    use super::*;

    #[test]
    fn a_descriptor_sent_with_a_line_arrives_with_it_and_refers_to_the_same_file() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"passed").unwrap();
        let fd = OwnedFd::from(file.try_clone().unwrap());
        send_line(&mut a, b"{\"here\":1}\n", Some(&fd)).unwrap();
        let (line, got) = receive_line(&b, 4096).unwrap();
        assert_eq!(line, b"{\"here\":1}\n");
        let mut got = std::fs::File::from(got.unwrap());
        got.rewind().unwrap();
        let mut text = String::new();
        got.read_to_string(&mut text).unwrap();
        assert_eq!(text, "passed");
    }

    #[test]
    fn a_line_without_a_descriptor_and_one_too_long_or_cut_short() {
        let (mut a, b) = UnixStream::pair().unwrap();
        send_line(&mut a, b"plain\n", None).unwrap();
        let (line, fd) = receive_line(&b, 4096).unwrap();
        assert_eq!(
            (line.as_slice(), fd.is_none()),
            (b"plain\n".as_slice(), true)
        );
        a.write_all(&[b'x'; 100]).unwrap();
        let long = receive_line(&b, 64).unwrap_err();
        assert_eq!(long.kind(), io::ErrorKind::InvalidData);
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"cut").unwrap();
        drop(a);
        let cut = receive_line(&b, 64).unwrap_err();
        assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);
    }
}
