//! Just enough HTTP to ask a member how it is: one HTTP/1.0 request over a
//! fresh connection, with a deadline on the whole exchange, and the few
//! fields of etcd's JSON answers the harness reads.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A member's answer to an HTTP request
/// ([`EtcdServer::request`](super::EtcdServer::request)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpResponse {
    /// The status code: 200, 404, …
    pub status: u16,
    /// The body, as text (etcd's gateway answers JSON).
    pub body: String,
}

/// What a member's `POST /v3/maintenance/status` says
/// ([`EtcdServer::status`](super::EtcdServer::status)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberStatus {
    /// The member's id in its cluster.
    pub member_id: u64,
    /// The id of the member it follows (its own when it leads); `None`
    /// while it knows of no leader.
    pub leader: Option<u64>,
    /// The raft term it is in: a new election makes a new term.
    pub raft_term: u64,
}

impl MemberStatus {
    /// Whether the member leads its cluster, by its own account.
    pub fn is_leader(&self) -> bool {
        self.leader == Some(self.member_id)
    }

    /// Reads the fields from the gateway's JSON, where etcd's 64-bit
    /// numbers are strings (`"member_id":"1381540707029590151"`) and a zero
    /// field (no leader) is left out.
    pub(super) fn parse(body: &str) -> Option<Self> {
        let number = |key: &str| json_string(body, key).and_then(|v| v.parse::<u64>().ok());
        Some(Self {
            member_id: number("member_id")?,
            leader: number("leader").filter(|&id| id != 0),
            raft_term: number("raftTerm").unwrap_or(0),
        })
    }
}

/// Sends `method path` with `body` (as JSON, when given) to
/// `127.0.0.1:port` over HTTP/1.0 and reads the answer until the member
/// closes the connection.
///
/// # Errors
///
/// [`io::ErrorKind::TimedOut`] when the whole exchange takes longer than
/// `timeout` (a paused member, or one without a quorum, accepts the
/// connection and never answers); another error when the connection is
/// refused or the answer is not HTTP.
pub(super) fn request(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "no answer in time"))
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, left()?)?;
    let mut message = format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n");
    if let Some(body) = body {
        message.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        message.push_str("\r\n");
    }
    stream.set_write_timeout(Some(left()?))?;
    stream.write_all(message.as_bytes()).map_err(timed_out)?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        stream.set_read_timeout(Some(left()?))?;
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(timed_out(e)),
        }
    }
    parse_response(&String::from_utf8_lossy(&answer))
}

/// A socket timeout shows as `WouldBlock` on Unix: call it `TimedOut`.
fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "no answer in time")
    } else {
        e
    }
}

/// Splits `HTTP/1.x CODE REASON\r\nheaders\r\n\r\nbody`.
fn parse_response(answer: &str) -> io::Result<HttpResponse> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not an HTTP answer: {answer:?}"),
        )
    };
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(invalid)?;
    let status = head
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(invalid)?;
    Ok(HttpResponse {
        status,
        body: body.to_owned(),
    })
}

/// The first string value of `key` in a JSON text, wherever it is nested:
/// enough for etcd's flat answers, whose keys the harness reads occur once.
pub(super) fn json_string<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let quoted = format!("\"{key}\"");
    let mut rest = json;
    while let Some(at) = rest.find(&quoted) {
        rest = &rest[at + quoted.len()..];
        let Some(value) = rest.trim_start().strip_prefix(':') else {
            // The key's text as a value, not a key.
            continue;
        };
        let value = value.trim_start().strip_prefix('"')?;
        return value.find('"').map(|end| &value[..end]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = r#"{"header":{"cluster_id":"15534692384254201323","member_id":"1381540707029590151","revision":"1","raft_term":"2"},"version":"3.4.23","dbSize":"20480","leader":"1381540707029590151","raftIndex":"6","raftTerm":"2","raftAppliedIndex":"6","dbSizeInUse":"16384"}"#;

    #[test]
    fn reads_a_leaders_status() {
        let status = MemberStatus::parse(STATUS).expect("a status");
        assert_eq!(status.member_id, 1_381_540_707_029_590_151);
        assert_eq!(status.leader, Some(1_381_540_707_029_590_151));
        assert_eq!(status.raft_term, 2);
        assert!(status.is_leader());
    }

    #[test]
    fn a_member_without_a_leader_has_no_leader_field() {
        let body = r#"{"header":{"cluster_id":"1","member_id":"11011949906421398991","revision":"1","raft_term":"3"},"version":"3.4.23","raftTerm":"3","errors":["etcdserver: no leader"]}"#;
        let status = MemberStatus::parse(body).expect("a status");
        assert_eq!(status.leader, None);
        assert!(!status.is_leader());
    }

    #[test]
    fn json_string_skips_a_key_that_is_a_value() {
        assert_eq!(
            json_string(r#"{"a":"leader","leader":"7"}"#, "leader"),
            Some("7")
        );
        assert_eq!(json_string(r#"{"leader" : "7"}"#, "leader"), Some("7"));
        assert_eq!(json_string(r#"{"other":"7"}"#, "leader"), None);
    }

    #[test]
    fn parses_an_http_answer() {
        let answer =
            "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"health\":\"true\"}";
        let response = parse_response(answer).expect("an answer");
        assert_eq!(response.status, 200);
        assert_eq!(response.body, r#"{"health":"true"}"#);
        assert!(parse_response("garbage").is_err());
    }
}
