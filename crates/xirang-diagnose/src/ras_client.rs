//! NCCL RAS's client protocol (docs/reference/live-signals.md §B, `client_support.cc`):
//! line-based text over TCP, `CLIENT PROTOCOL 2` answered by `SERVER PROTOCOL 2`,
//! `TIMEOUT <s>` and `SET FORMAT json` answered by `OK` (or `ERROR: ...`, the format
//! command by servers older than 2.28.7), then `VERBOSE STATUS`, whose report ends when
//! the server closes the connection. Every read is bounded in bytes and time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::ras::MAX_REPORT_BYTES;

/// RAS's client port (`ras_internal.h`).
pub const RAS_PORT: u16 = 28028;
/// The protocol version this client speaks (2 in every release with RAS).
const PROTOCOL: u32 = 2;
/// Longest handshake line read.
const MAX_LINE_BYTES: u64 = 1024;
/// A report has this long after the handshake, at least, to arrive in full (RAS's own
/// collection takes up to its timeout per leg; a server that trickles bytes is cut off).
const MIN_REPORT_DEADLINE: Duration = Duration::from_secs(30);
/// ... and at most this many times RAS's timeout.
const REPORT_DEADLINE_FACTOR: u32 = 6;

/// Why the RAS server could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{addr}: {message}")]
pub struct ClientError {
    /// `host:port`.
    pub addr: String,
    /// What went wrong.
    pub message: String,
}

/// What the server sent: the report's text and whether it is JSON.
pub struct Fetched {
    /// The report.
    pub text: String,
    /// False when the server is older than JSON reports (2.28.7) and answered in text.
    pub json: bool,
}

/// Asks the RAS server at `addr` (`host:port`, or a host: port 28028) for its verbose
/// status, in JSON where the server has it. `timeout` is RAS's own collection timeout
/// (`TIMEOUT`) and the longest silence tolerated on the socket.
pub fn fetch(addr: &str, timeout: Duration) -> Result<Fetched, ClientError> {
    let target = if addr
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !addr.ends_with(']')
    {
        addr.to_string()
    } else {
        format!("{addr}:{RAS_PORT}")
    };
    let err = |m: String| ClientError {
        addr: target.clone(),
        message: m,
    };
    let sock = target
        .to_socket_addrs()
        .map_err(|e| err(format!("resolving: {e}")))?
        .next()
        .ok_or_else(|| err("the host has no address".into()))?;
    let stream = TcpStream::connect_timeout(&sock, timeout).map_err(|e| {
        err(format!(
            "connecting: {e} (is an NCCL job with RAS running there? NCCL_RAS_ADDR moves it)"
        ))
    })?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| err(format!("setting timeouts: {e}")))?;
    let mut w = stream.try_clone().map_err(|e| err(e.to_string()))?;
    let mut r = BufReader::new(stream);
    let mut ask = |cmd: &str, r: &mut BufReader<TcpStream>| -> Result<String, ClientError> {
        w.write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| err(format!("sending `{cmd}`: {e}")))?;
        let mut line = String::new();
        r.by_ref()
            .take(MAX_LINE_BYTES)
            .read_line(&mut line)
            .map_err(|e| err(format!("reading the answer to `{cmd}`: {e}")))?;
        if !line.ends_with('\n') {
            return Err(err(format!(
                "answered `{cmd}` with `{}`{}: expected a line",
                line.chars().take(60).collect::<String>(),
                if line.len() as u64 >= MAX_LINE_BYTES {
                    " and more"
                } else {
                    " and closed"
                }
            )));
        }
        Ok(line.trim().to_string())
    };
    let hello = ask(&format!("CLIENT PROTOCOL {PROTOCOL}"), &mut r)?;
    if !hello.to_ascii_uppercase().starts_with("SERVER PROTOCOL") {
        return Err(err(format!(
            "answered `{}`: expected `SERVER PROTOCOL {PROTOCOL}` (not an NCCL RAS server?)",
            hello.chars().take(60).collect::<String>()
        )));
    }
    let secs = timeout.as_secs().max(1);
    let ok = ask(&format!("TIMEOUT {secs}"), &mut r)?;
    if ok != "OK" {
        return Err(err(format!("refused `TIMEOUT {secs}`: {ok}")));
    }
    let json = ask("SET FORMAT json", &mut r)? == "OK";
    let deadline = Instant::now() + MIN_REPORT_DEADLINE.max(timeout * REPORT_DEADLINE_FACTOR);
    r.get_mut()
        .write_all(b"VERBOSE STATUS\n")
        .map_err(|e| err(format!("sending `VERBOSE STATUS`: {e}")))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    loop {
        if Instant::now() > deadline {
            return Err(err(format!(
                "the report did not end within {:?} ({} bytes so far)",
                MIN_REPORT_DEADLINE.max(timeout * REPORT_DEADLINE_FACTOR),
                buf.len()
            )));
        }
        let n = r
            .read(&mut chunk)
            .map_err(|e| err(format!("reading the report ({} bytes so far): {e}", buf.len())))?;
        if n == 0 {
            break;
        }
        if buf.len() + n > MAX_REPORT_BYTES {
            return Err(err(format!("a report of more than {MAX_REPORT_BYTES} bytes")));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Fetched {
        text: String::from_utf8_lossy(&buf).into_owned(),
        json,
    })
}
