//! `/metrics`: the status board in Prometheus text format over a minimal HTTP/1.1 responder.
//! One GET per connection is all a scraper needs, so a web framework would be all weight.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::context::Context;
use crate::error::{Result, RuntimeError};

/// The largest request head read; a scraper's is a few hundred bytes.
const MAX_REQUEST: usize = 8192;

pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| RuntimeError::Io {
            what: format!("metrics: binding {addr}"),
            source,
        })
}

pub async fn serve(listener: TcpListener, ctx: Arc<Context>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &ctx).await {
                tracing::debug!(error = %e, "metrics request");
            }
        });
    }
}

async fn answer(mut stream: TcpStream, ctx: &Context) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) =
        if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
            (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                ctx.status.render(&ctx.cfg.instance_id) + &ctx.queries.render(&ctx.cfg.instance_id),
            )
        } else {
            ("404 Not Found", "text/plain", "try /metrics\n".to_owned())
        };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
