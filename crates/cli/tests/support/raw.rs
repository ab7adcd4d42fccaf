//! A raw HTTP/1.1 client on a blocking socket, for tests of what the server
//! does to slow and idle clients: it sends exactly the bytes a test gives
//! it, stalls where the test stops, and reads what comes back. Every read
//! waits at most [`PATIENCE`]: a server that should close a connection
//! and does not fails the test then.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The longest wait for a byte or the end of a connection.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// One connection.
pub(crate) struct Raw {
    stream: TcpStream,
}

/// An answer read off a connection.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The status code.
    pub(crate) status: u16,
    /// The head, as received (lower-case names, as hyper writes them).
    pub(crate) head: String,
    /// The body.
    pub(crate) body: String,
}

impl Answer {
    /// The value of header `name` (lower case), if present.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

impl Raw {
    /// Connects to `address` (`host:port`).
    pub(crate) fn connect(address: &str) -> Raw {
        let stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Raw { stream }
    }

    /// Sends `bytes` as they are.
    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Sends a whole request (`Host: t`, with `Content-Length` when there
    /// is a body) and reads its answer.
    pub(crate) fn request(&mut self, method: &str, path: &str, body: Option<&str>) -> Answer {
        let request = match body {
            Some(body) => format!(
                "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            ),
            None => format!("{method} {path} HTTP/1.1\r\nHost: t\r\n\r\n"),
        };
        self.send(request.as_bytes());
        self.answer()
    }

    /// Reads one answer (head, and a `Content-Length` body).
    pub(crate) fn answer(&mut self) -> Answer {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match self.stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                Ok(_) => panic!(
                    "the connection closed before an answer: {:?}",
                    String::from_utf8_lossy(&head)
                ),
                Err(e) => panic!("no answer: {e}"),
            }
        }
        let head = String::from_utf8(head).unwrap();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {head:?}"));
        let mut answer = Answer {
            status,
            head,
            body: String::new(),
        };
        let length: usize = answer
            .header("content-length")
            .map_or(0, |l| l.parse().unwrap());
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body).unwrap();
        answer.body = String::from_utf8(body).unwrap();
        answer
    }

    /// Reads until the server closes the connection and returns what came;
    /// fails when the connection is still open after [`PATIENCE`] without
    /// a byte.
    pub(crate) fn until_closed(&mut self) -> Vec<u8> {
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            match self.stream.read(&mut buffer) {
                Ok(0) => return received,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
                // A reset is a close too.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return received,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!("the connection was still open after {PATIENCE:?}")
                }
                Err(e) => panic!("reading failed: {e}"),
            }
        }
    }
}
