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
    Failed(HopError),
}

/// Why another instance's query server gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum HopError {
    #[error("connecting: {0}")]
    Connecting(std::io::Error),
    #[error("handshake: {0}")]
    Handshake(hyper::Error),
    #[error("building the request: {0}")]
    Request(axum::http::Error),
    #[error("sending: {0}")]
    Sending(hyper::Error),
    #[error("reading the answer: {0}")]
    Reading(Box<dyn std::error::Error + Send + Sync>),
    #[error("the deadline passed")]
    DeadlinePassed,
    #[error("no answer within {0} ms")]
    NoAnswerWithin(u128),
}

impl HopError {
    /// The server is gone or went away mid-answer (killed, or exited after its drain): a GET
    /// may be asked again of another instance.
    pub fn server_gone(&self) -> bool {
        matches!(
            self,
            HopError::Connecting(_) | HopError::Sending(_) | HopError::Reading(_)
        )
    }
}

pub async fn forward(to: &HostInfo, path: &str, deadline: Instant) -> Forwarded {
    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
        return Forwarded::Failed(HopError::DeadlinePassed);
    };
    match tokio::time::timeout(left, exchange(to, path, left.as_millis() as u64)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => Forwarded::Failed(why),
        Err(_) => Forwarded::Failed(HopError::NoAnswerWithin(left.as_millis())),
    }
}

/// `GET path` from the query server at `addr` (`HOST:PORT`), as a caller outside the group
/// asks (`baton query`, tests): the status and the JSON answer, or why there was none.
pub async fn get(
    addr: &str,
    path: &str,
    timeout: std::time::Duration,
) -> Result<(StatusCode, Value), HopError> {
    match tokio::time::timeout(timeout, request(addr, path, &[])).await {
        Ok(Ok(Forwarded::Answer(status, body))) => Ok((status, body)),
        Ok(Ok(Forwarded::Failed(why))) | Ok(Err(why)) => Err(why),
        Err(_) => Err(HopError::NoAnswerWithin(timeout.as_millis())),
    }
}

async fn exchange(to: &HostInfo, path: &str, left_ms: u64) -> Result<Forwarded, HopError> {
    let left = left_ms.to_string();
    request(
        &endpoint(to),
        path,
        &[(HOP_HEADER, "1"), (DEADLINE_HEADER, &left)],
    )
    .await
}

async fn request(addr: &str, path: &str, headers: &[(&str, &str)]) -> Result<Forwarded, HopError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(HopError::Connecting)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(HopError::Handshake)?;
    let conn = tokio::spawn(conn);
    let mut request = Request::get(path).header("host", addr);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(HopError::Request)?;
    let response = sender
        .send_request(request)
        .await
        .map_err(HopError::Sending)?;
    let status = response.status();
    let body = Limited::new(response.into_body(), LARGEST_ANSWER)
        .collect()
        .await
        .map_err(HopError::Reading)?
        .to_bytes();
    conn.abort();
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    Ok(Forwarded::Answer(status, body))
}
