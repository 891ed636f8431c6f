//! One hop to another instance's query server, within the caller's deadline.

use std::time::Instant;

use axum::http::{Request, StatusCode};
use baton_protocol::HostInfo;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::query::routing::endpoint;
use crate::query::server::{DEADLINE_HEADER, HOP_HEADER};

/// The largest answer taken from another instance.
const LARGEST_ANSWER: usize = 64 << 20;

pub enum Forwarded {
    /// The other instance answered, with this status and JSON body.
    Answer(StatusCode, Value),
    /// No answer: why, for the caller's 503.
    Failed(String),
}

pub async fn forward(to: &HostInfo, path: &str, deadline: Instant) -> Forwarded {
    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
        return Forwarded::Failed("the deadline passed".into());
    };
    match tokio::time::timeout(left, exchange(to, path, left.as_millis() as u64)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => Forwarded::Failed(why),
        Err(_) => Forwarded::Failed("no answer by the deadline".into()),
    }
}

/// `GET path` from the query server at `addr` (`HOST:PORT`), as a caller outside the group
/// asks (`baton query`, tests): the status and the JSON answer, or why there was none.
pub async fn get(
    addr: &str,
    path: &str,
    timeout: std::time::Duration,
) -> Result<(StatusCode, Value), String> {
    match tokio::time::timeout(timeout, request(addr, path, &[])).await {
        Ok(Ok(Forwarded::Answer(status, body))) => Ok((status, body)),
        Ok(Ok(Forwarded::Failed(why))) | Ok(Err(why)) => Err(why),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn exchange(to: &HostInfo, path: &str, left_ms: u64) -> Result<Forwarded, String> {
    let left = left_ms.to_string();
    request(
        &endpoint(to),
        path,
        &[(HOP_HEADER, "1"), (DEADLINE_HEADER, &left)],
    )
    .await
}

async fn request(addr: &str, path: &str, headers: &[(&str, &str)]) -> Result<Forwarded, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let conn = tokio::spawn(conn);
    let mut request = Request::get(path).header("host", addr);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("building the request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("sending: {e}"))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), LARGEST_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    conn.abort();
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    Ok(Forwarded::Answer(status, body))
}
