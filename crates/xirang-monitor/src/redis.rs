//! A Redis client for reading a switch's databases: RESP2 over TCP or a unix socket,
//! synchronous, with every exchange bounded: a silence timeout per read and a deadline
//! per pipeline (a server that trickles bytes is cut off), bytes per string and per line,
//! elements per array, and memory per pipeline (what its replies hold, strings and the
//! values around them), so a stalled or hostile server costs at most a deadline and a
//! stated amount of memory.
//!
//! Written here rather than taken from the `redis` crate: the monitor needs only a
//! handful of read commands, pipelined, and it must refuse a reply that announces a
//! gigabyte string or a billion elements before allocating for it, which that crate has
//! no setting for. The protocol is RESP2 as Redis documents it: `+simple`, `-error`,
//! `:integer`, `$len` bulk strings (`$-1` nil), `*count` arrays (`*-1` nil), each line
//! ended by CRLF; commands are arrays of bulk strings.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where a Redis server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port`.
    Tcp {
        /// Host name or address.
        host: String,
        /// TCP port.
        port: u16,
    },
    /// A unix socket (SONiC's default: `/var/run/redis/redis.sock`).
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "redis://[{host}]:{port}"),
            Endpoint::Tcp { host, port } => write!(f, "redis://{host}:{port}"),
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// What one reply may hold at most.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connect, read and write timeout (the longest silence).
    pub timeout: Duration,
    /// The longest a pipeline (commands sent, every reply read) may take.
    pub deadline: Duration,
    /// Bytes of one bulk string.
    pub max_bulk_bytes: usize,
    /// Elements of one array.
    pub max_array_len: usize,
    /// Bytes the replies of one pipeline may hold: their strings and framing, and the
    /// values around them in memory.
    pub max_reply_bytes: usize,
    /// Bytes of one line (a simple string, an error, a length).
    pub max_line_bytes: usize,
}

/// Bounds that hold a large switch's COUNTERS_DB with room to spare: a name map of 64
/// ports x 20 queues is 2,560 elements of about 30 bytes; a counter hash about 400
/// fields; a round's hashes about 11 MB. A reply beyond them is refused, not read.
pub const SWITCH_LIMITS: Limits = Limits {
    timeout: Duration::from_secs(5),
    deadline: Duration::from_secs(30),
    max_bulk_bytes: 1 << 20,
    max_array_len: 1 << 18,
    max_reply_bytes: 64 << 20,
    max_line_bytes: 4 << 10,
};

/// Nesting depth of arrays the client follows: the commands it sends get flat arrays.
const MAX_DEPTH: usize = 4;

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `+OK`.
    Simple(String),
    /// `:42`.
    Int(i64),
    /// `$5 hello`, or `$-1` (None).
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`, or `*-1` (None).
    Array(Option<Vec<Value>>),
    /// `-ERR ...`: the server refused the command.
    Error(String),
}

/// Why talking to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// Could not connect, or the connection failed while reading or writing.
    #[error("{endpoint}: {what}: {source}")]
    Io {
        /// Server.
        endpoint: String,
        /// What was being done.
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// The server sent something that is not RESP2, or more than the limits allow.
    #[error("{endpoint}: {message}")]
    Protocol {
        /// Server.
        endpoint: String,
        /// What was wrong.
        message: String,
    },
    /// The server answered a command with an error.
    #[error("{endpoint}: `{command}` failed: {message}")]
    Server {
        /// Server.
        endpoint: String,
        /// The command.
        command: String,
        /// The server's error text.
        message: String,
    },
}

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// One connection.
pub struct Conn {
    endpoint: String,
    limits: Limits,
    io: BufReader<Stream>,
    /// Bytes left for the replies of the pipeline being read.
    budget: usize,
    /// When the pipeline being read must be done.
    until: std::time::Instant,
}

impl Conn {
    /// Connects, with `limits.timeout` for the connection and for every read and write.
    pub fn connect(endpoint: &Endpoint, limits: Limits) -> Result<Conn, RedisError> {
        let name = endpoint.to_string();
        let io_err = |what, source| RedisError::Io {
            endpoint: name.clone(),
            what,
            source,
        };
        let stream = match endpoint {
            Endpoint::Tcp { host, port } => {
                use std::net::ToSocketAddrs as _;
                let addrs = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| io_err("resolving the host", e))?;
                let mut last = None;
                let mut stream = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, limits.timeout) {
                        Ok(s) => {
                            stream = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let s = stream.ok_or_else(|| {
                    io_err(
                        "connecting",
                        last.unwrap_or_else(|| std::io::Error::other("the host has no address")),
                    )
                })?;
                s.set_read_timeout(Some(limits.timeout))
                    .and_then(|()| s.set_write_timeout(Some(limits.timeout)))
                    .and_then(|()| s.set_nodelay(true))
                    .map_err(|e| io_err("setting timeouts", e))?;
                Stream::Tcp(s)
            }
            #[cfg(unix)]
            Endpoint::Unix(path) => {
                let s = UnixStream::connect(path).map_err(|e| io_err("connecting", e))?;
                s.set_read_timeout(Some(limits.timeout))
                    .and_then(|()| s.set_write_timeout(Some(limits.timeout)))
                    .map_err(|e| io_err("setting timeouts", e))?;
                Stream::Unix(s)
            }
            #[cfg(not(unix))]
            Endpoint::Unix(_) => {
                return Err(io_err(
                    "connecting",
                    std::io::Error::other("unix sockets need a unix system"),
                ));
            }
        };
        Ok(Conn {
            endpoint: name,
            limits,
            io: BufReader::new(stream),
            budget: 0,
            until: std::time::Instant::now(),
        })
    }

    /// A connection over a unix stream already open (one end of `UnixStream::pair`, for
    /// the fuzz target that plays a server's bytes), named `endpoint` in errors.
    #[cfg(unix)]
    pub fn over(stream: UnixStream, limits: Limits, endpoint: &str) -> Result<Conn, RedisError> {
        stream
            .set_read_timeout(Some(limits.timeout))
            .and_then(|()| stream.set_write_timeout(Some(limits.timeout)))
            .map_err(|source| RedisError::Io {
                endpoint: endpoint.to_string(),
                what: "setting timeouts",
                source,
            })?;
        Ok(Conn {
            endpoint: endpoint.to_string(),
            limits,
            io: BufReader::new(Stream::Unix(stream)),
            budget: 0,
            until: std::time::Instant::now(),
        })
    }

    /// Sends one command and reads its reply; a server error is an `Err`.
    pub fn command(&mut self, args: &[&str]) -> Result<Value, RedisError> {
        let mut v = self.pipeline(&[args.to_vec()])?;
        Ok(v.remove(0))
    }

    /// Sends commands in one write and reads their replies in order. A server error
    /// answering any of them is an `Err` naming that command.
    pub fn pipeline(&mut self, cmds: &[Vec<&str>]) -> Result<Vec<Value>, RedisError> {
        let mut buf = Vec::new();
        for c in cmds {
            encode(c, &mut buf);
        }
        self.io
            .get_mut()
            .write_all(&buf)
            .and_then(|()| self.io.get_mut().flush())
            .map_err(|e| self.io_err("sending commands", e))?;
        let mut out = Vec::with_capacity(cmds.len());
        self.budget = self.limits.max_reply_bytes;
        self.until = std::time::Instant::now() + self.limits.deadline;
        for c in cmds {
            match self.value(0)? {
                Value::Error(message) => {
                    return Err(RedisError::Server {
                        endpoint: self.endpoint.clone(),
                        command: c.join(" "),
                        message,
                    });
                }
                v => out.push(v),
            }
        }
        Ok(out)
    }

    fn io_err(&self, what: &'static str, source: std::io::Error) -> RedisError {
        RedisError::Io {
            endpoint: self.endpoint.clone(),
            what,
            source,
        }
    }

    fn protocol(&self, message: String) -> RedisError {
        RedisError::Protocol {
            endpoint: self.endpoint.clone(),
            message,
        }
    }

    /// Takes `n` bytes from the pipeline's budget.
    fn spend(&mut self, n: usize) -> Result<(), RedisError> {
        if n > self.budget {
            return Err(self.protocol(format!(
                "replies of more than {} bytes (the limit)",
                self.limits.max_reply_bytes
            )));
        }
        self.budget -= n;
        Ok(())
    }

    /// Fails once the pipeline's deadline has passed.
    fn in_time(&self) -> Result<(), RedisError> {
        if std::time::Instant::now() > self.until {
            return Err(self.protocol(format!(
                "replies not done within {:?} (a server sending too slowly)",
                self.limits.deadline
            )));
        }
        Ok(())
    }

    /// One CRLF-ended line, without the CRLF, at most `max_line_bytes` long.
    fn line(&mut self) -> Result<String, RedisError> {
        let mut line = Vec::new();
        loop {
            self.in_time()?;
            let endpoint = &self.endpoint;
            let io_err = |source| RedisError::Io {
                endpoint: endpoint.clone(),
                what: "reading a reply",
                source,
            };
            let avail = self.io.fill_buf().map_err(io_err)?;
            if avail.is_empty() {
                return Err(io_err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
            let (take, done) = match avail.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            line.extend_from_slice(&avail[..take]);
            self.io.consume(take);
            if line.len() > self.limits.max_line_bytes + 2 {
                return Err(self.protocol(format!(
                    "a reply line longer than {} bytes",
                    self.limits.max_line_bytes
                )));
            }
            if done {
                break;
            }
        }
        self.spend(line.len())?;
        if !line.ends_with(b"\r\n") {
            return Err(self.protocol("a reply line not ended by CRLF".into()));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|_| self.protocol("a reply line that is not UTF-8".into()))
    }

    fn value(&mut self, depth: usize) -> Result<Value, RedisError> {
        let line = self.line()?;
        let Some(kind) = line.chars().next() else {
            return Err(self.protocol("an empty reply line, expected a RESP2 type byte".into()));
        };
        let rest = &line[kind.len_utf8()..];
        let len = |c: &Conn, what: &str| -> Result<i64, RedisError> {
            rest.parse::<i64>()
                .map_err(|_| c.protocol(format!("{what} `{rest}`: expected an integer")))
        };
        // A bulk string's or an array's length: None for `-1` (nil), else at most `max`.
        let size = |c: &Conn, what: &str, max: usize| -> Result<Option<usize>, RedisError> {
            let n = len(c, what)?;
            if n == -1 {
                return Ok(None);
            }
            let n = usize::try_from(n).map_err(|_| c.protocol(format!("{what} {n}: expected -1 or more")))?;
            if n > max {
                return Err(c.protocol(format!("{what} {n}, more than the {max} allowed")));
            }
            Ok(Some(n))
        };
        match kind {
            '+' => Ok(Value::Simple(rest.to_string())),
            '-' => Ok(Value::Error(rest.to_string())),
            ':' => Ok(Value::Int(len(self, "integer reply")?)),
            '$' => {
                let Some(n) = size(self, "bulk string length", self.limits.max_bulk_bytes)? else {
                    return Ok(Value::Bulk(None));
                };
                self.spend(n + 2)?;
                let mut data = vec![0; n + 2];
                let mut got = 0;
                while got < data.len() {
                    self.in_time()?;
                    let k = self
                        .io
                        .read(&mut data[got..])
                        .map_err(|e| self.io_err("reading a bulk string", e))?;
                    if k == 0 {
                        return Err(self.io_err(
                            "reading a bulk string",
                            std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                "the server closed the connection",
                            ),
                        ));
                    }
                    got += k;
                }
                if !data.ends_with(b"\r\n") {
                    return Err(self.protocol("a bulk string not ended by CRLF".into()));
                }
                data.truncate(n);
                Ok(Value::Bulk(Some(data)))
            }
            '*' => {
                let Some(n) = size(self, "array length", self.limits.max_array_len)? else {
                    return Ok(Value::Array(None));
                };
                if depth >= MAX_DEPTH {
                    return Err(self.protocol(format!("arrays nested deeper than {MAX_DEPTH}")));
                }
                // Each element is charged the value that holds it, so the budget bounds
                // memory, not only bytes on the wire; reserve no more than it could hold.
                let per = std::mem::size_of::<Value>();
                let mut items = Vec::with_capacity(n.min(self.budget / per));
                for _ in 0..n {
                    self.spend(per)?;
                    items.push(self.value(depth + 1)?);
                }
                Ok(Value::Array(Some(items)))
            }
            other => Err(self.protocol(format!(
                "a reply starting with `{}`, expected one of + - : $ *",
                other.escape_default()
            ))),
        }
    }
}

/// Appends a command as a RESP2 array of bulk strings.
fn encode(args: &[&str], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

impl Value {
    /// A `HGETALL` reply as field-value pairs (an odd count or a non-string is an error).
    pub fn into_pairs(self) -> Result<Vec<(String, String)>, String> {
        let items = match self {
            Value::Array(Some(items)) => items,
            Value::Array(None) => return Ok(Vec::new()),
            other => return Err(format!("expected an array of fields and values, found {other:?}")),
        };
        if items.len() % 2 != 0 {
            return Err(format!(
                "expected fields and values in pairs, found {} strings",
                items.len()
            ));
        }
        let text = |v: Value| match v {
            Value::Bulk(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
            other => Err(format!("expected a string, found {other:?}")),
        };
        let mut out = Vec::with_capacity(items.len() / 2);
        let mut it = items.into_iter();
        while let (Some(f), Some(v)) = (it.next(), it.next()) {
            out.push((text(f)?, text(v)?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that answers the first command with `reply` (and then keeps the
    /// connection open for a while, or closes it).
    fn serve(reply: Vec<u8>, then_close: bool) -> Endpoint {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            let _ = s.write_all(&reply);
            if !then_close {
                std::thread::sleep(Duration::from_secs(3));
            }
        });
        Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port,
        }
    }

    fn small() -> Limits {
        Limits {
            timeout: Duration::from_millis(500),
            deadline: Duration::from_secs(2),
            max_bulk_bytes: 64,
            max_array_len: 8,
            max_reply_bytes: 256,
            max_line_bytes: 32,
        }
    }

    fn ask(reply: &[u8], then_close: bool) -> Result<Value, RedisError> {
        let ep = serve(reply.to_vec(), then_close);
        Conn::connect(&ep, small())?.command(&["HGETALL", "k"])
    }

    #[test]
    fn replies_parse() {
        assert_eq!(ask(b"+OK\r\n", false).unwrap(), Value::Simple("OK".into()));
        assert_eq!(ask(b":-7\r\n", false).unwrap(), Value::Int(-7));
        assert_eq!(ask(b"$-1\r\n", false).unwrap(), Value::Bulk(None));
        let v = ask(b"*4\r\n$1\r\na\r\n$2\r\n12\r\n$1\r\nb\r\n$0\r\n\r\n", false).unwrap();
        assert_eq!(
            v.into_pairs().unwrap(),
            vec![("a".into(), "12".into()), ("b".into(), String::new())]
        );
        let e = ask(b"-WRONGTYPE no\r\n", false).unwrap_err().to_string();
        assert!(e.contains("`HGETALL k` failed: WRONGTYPE no"), "{e}");
    }

    #[test]
    fn hostile_replies_are_refused_before_reading_them() {
        for (reply, want) in [
            (&b"$1000000000\r\n"[..], "bulk string length 1000000000, more than the 64 allowed"),
            (b"*1000000000\r\n", "array length 1000000000, more than the 8 allowed"),
            (b"*8\r\n*8\r\n*8\r\n*8\r\n*8\r\n", "nested deeper"),
            (b"$-5\r\n", "expected -1 or more"),
            (b"$abc\r\n", "expected an integer"),
            (b"?x\r\n", "expected one of"),
            (b"+OK\n", "not ended by CRLF"),
            (b"$2\r\nabcd", "not ended by CRLF"),
            (b"+aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", "longer than 32"),
            (
                b"*8\r\n$60\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n$60\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n$60\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n$60\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n$60\r\n",
                "more than 256 bytes",
            ),
        ] {
            let e = ask(reply, false).unwrap_err().to_string();
            assert!(e.contains(want), "{reply:?}: {e}");
        }
    }

    #[test]
    fn a_truncated_reply_or_a_stalled_server_ends_in_an_error() {
        let e = ask(b"*2\r\n$1\r\na\r\n", true).unwrap_err().to_string();
        assert!(e.contains("closed the connection"), "{e}");
        let t0 = std::time::Instant::now();
        let e = ask(b"*2\r\n$1\r\na\r\n", false).unwrap_err();
        assert!(matches!(e, RedisError::Io { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_server_that_trickles_bytes_is_cut_off_at_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf);
            // A valid 40-byte string, one byte every 150 ms: never silent for the 500 ms
            // timeout, done only after 6 s.
            for b in b"$40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n" {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        let ep = Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let t0 = std::time::Instant::now();
        let e = Conn::connect(&ep, small())
            .unwrap()
            .command(&["GET", "k"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not done within 2s"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_server_that_is_not_there_is_named() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let ep = Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let e = Conn::connect(&ep, small()).err().unwrap().to_string();
        assert!(
            e.starts_with(&format!("redis://127.0.0.1:{port}: connecting: ")),
            "{e}"
        );
    }

    #[test]
    fn commands_are_encoded_as_bulk_arrays() {
        let mut b = Vec::new();
        encode(&["HGETALL", "COUNTERS:oid:0x1"], &mut b);
        assert_eq!(b, b"*2\r\n$7\r\nHGETALL\r\n$16\r\nCOUNTERS:oid:0x1\r\n");
    }
}
