//! `baton query`: one key of a store, through any instance's query server (docs/QUERIES.md).

use std::time::Duration;

use baton_runtime::query::forward::get;
use clap::Args;

use crate::{emit, tokio_runtime, Failure, EXIT_BAD_INPUT};

#[derive(Args)]
pub struct QueryArgs {
    /// Any instance's --application-server, HOST:PORT.
    #[arg(long)]
    server: String,
    /// The store, e.g. `counts`.
    store: String,
    /// The key in the store's key serde's text form (the string, or a decimal number).
    key: String,
    /// Accept a copy at most this many changelog records behind.
    #[arg(long, value_name = "N")]
    max_lag_offsets: Option<u64>,
    /// Accept a copy at most this many milliseconds behind its changelog's end.
    #[arg(long, value_name = "MS")]
    max_lag_ms: Option<u64>,
    /// Answer only once the copy has processed input past TOPIC:PARTITION:OFFSET.
    #[arg(long, value_name = "TOPIC:PARTITION:OFFSET")]
    at_least: Option<String>,
    /// How long the server may look for a copy that fits.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Print the whole answer, not only the value.
    #[arg(long)]
    json: bool,
}

/// A path segment or query value, percent-encoded.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn run(args: QueryArgs) -> Result<(), Failure> {
    let mut path = format!(
        "/v1/stores/{}/keys/{}?timeout_ms={}",
        encode(&args.store),
        encode(&args.key),
        args.timeout_ms
    );
    if let Some(m) = args.max_lag_offsets {
        path += &format!("&max_lag_offsets={m}");
    }
    if let Some(m) = args.max_lag_ms {
        path += &format!("&max_lag_ms={m}");
    }
    if let Some(a) = &args.at_least {
        path += &format!("&at_least={}", encode(a));
    }
    let limit = Duration::from_millis(args.timeout_ms) + Duration::from_secs(2);
    let answer = tokio_runtime()?.block_on(get(&args.server, &path, limit));
    let (status, body) = answer.map_err(|why| Failure {
        message: format!("query server {}: {why}", args.server),
        status: 1,
    })?;
    if !status.is_success() {
        return Err(Failure {
            message: format!("{status}: {body}"),
            status: if status.is_client_error() {
                EXIT_BAD_INPUT
            } else {
                1
            },
        });
    }
    let text = if args.json {
        serde_json::to_string_pretty(&body).unwrap_or_default()
    } else if body["found"] == true {
        format!(
            "{} (from the {} at {}, {} records and {} ms behind, position {})",
            body["value"],
            body["role"].as_str().unwrap_or("?"),
            body["served_by"].as_str().unwrap_or("?"),
            body["lag_offsets"],
            body["lag_ms"]
                .as_u64()
                .map_or("?".to_owned(), |m| m.to_string()),
            body["position"]
        )
    } else {
        format!(
            "not found (asked the {} at {}, position {})",
            body["role"].as_str().unwrap_or("?"),
            body["served_by"].as_str().unwrap_or("?"),
            body["position"]
        )
    };
    emit(&(text + "\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(encode("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(encode("k-1_x.y~"), "k-1_x.y~");
    }
}
