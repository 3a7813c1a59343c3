//! A plain HTTP/1.0 GET on loopback, for the tools the tests run on the host
//! (Prometheus, Jaeger): no chunked answers, the server closes the
//! connection after the body, so no HTTP client is needed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::Result;

/// The body of a 200 to `GET path` on 127.0.0.1:`port`.
pub fn get(port: u16, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("an HTTP answer without a body")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("GET {path}: {status}: {body}").into());
    }
    Ok(body.to_owned())
}
