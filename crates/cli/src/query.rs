//! `baton query`: one key of a store, a key's windows, or a page of one partition, through
//! any instance's query server (docs/QUERIES.md).

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
    /// The key in the store's key serde's text form (the string, or a decimal number); none
    /// with `--partition`.
    #[arg(required_unless_present = "partition")]
    key: Option<String>,
    /// A window store: the key's windows that start in `--from..=--to` (milliseconds).
    #[arg(long, conflicts_with = "partition")]
    windows: bool,
    /// A page of this partition of a key-value store, in key order, keys in
    /// `--from..=--to` (the key serde's text form), after `--after`.
    #[arg(long, value_name = "P", conflicts_with = "key")]
    partition: Option<u32>,
    /// Where windows start from (ms), or a page's first key.
    #[arg(long)]
    from: Option<String>,
    /// Where windows start up to (ms), or a page's last key.
    #[arg(long)]
    to: Option<String>,
    /// A page starts past this key (the previous page's last).
    #[arg(long, requires = "partition")]
    after: Option<String>,
    /// A page's most entries (at most 1,000).
    #[arg(long, requires = "partition")]
    limit: Option<usize>,
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

/// What the arguments ask for: its path and query string.
fn path_of(args: &QueryArgs) -> Result<String, Failure> {
    let bad = |message: String| Failure {
        message,
        status: EXIT_BAD_INPUT,
    };
    let store = encode(&args.store);
    let mut path = match (&args.key, args.partition) {
        (_, Some(p)) => {
            let mut path = format!("/v1/stores/{store}/partitions/{p}/range?");
            for (name, key) in [
                ("from", &args.from),
                ("to", &args.to),
                ("after", &args.after),
            ] {
                if let Some(k) = key {
                    path += &format!("{name}={}&", encode(k));
                }
            }
            if let Some(l) = args.limit {
                path += &format!("limit={l}&");
            }
            path
        }
        (Some(key), None) if args.windows => {
            let mut path = format!("/v1/stores/{store}/keys/{}/windows?", encode(key));
            for (name, ms) in [("from", &args.from), ("to", &args.to)] {
                if let Some(ms) = ms {
                    let ms: i64 = ms.parse().map_err(|_| {
                        bad(format!("--{name} {ms:?}: a window start in milliseconds"))
                    })?;
                    path += &format!("{name}={ms}&");
                }
            }
            path
        }
        (Some(key), None) => {
            if args.from.is_some() || args.to.is_some() {
                return Err(bad(
                    "--from and --to go with --windows or --partition".to_owned()
                ));
            }
            format!("/v1/stores/{store}/keys/{}?", encode(key))
        }
        (None, None) => return Err(bad("give a KEY or --partition".to_owned())),
    };
    path += &format!("timeout_ms={}", args.timeout_ms);
    if let Some(m) = args.max_lag_offsets {
        path += &format!("&max_lag_offsets={m}");
    }
    if let Some(m) = args.max_lag_ms {
        path += &format!("&max_lag_ms={m}");
    }
    if let Some(a) = &args.at_least {
        if args.windows || args.partition.is_some() {
            return Err(bad("--at-least goes with a key lookup".to_owned()));
        }
        path += &format!("&at_least={}", encode(a));
    }
    Ok(path)
}

pub fn run(args: QueryArgs) -> Result<(), Failure> {
    let path = path_of(&args)?;
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
    } else if args.partition.is_some() || args.windows {
        listing(&body, args.windows)
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

/// A page or a key's windows, one entry a line, then where it came from.
fn listing(body: &serde_json::Value, windows: bool) -> String {
    let empty = Vec::new();
    let field = if windows { "windows" } else { "entries" };
    let mut out = String::new();
    for e in body[field].as_array().unwrap_or(&empty) {
        if windows {
            out += &format!("{}..{}\t{}\n", e["start"], e["end"], e["value"]);
        } else {
            out += &format!("{}\t{}\n", e["key"], e["value"]);
        }
    }
    out += &format!(
        "({} {field}, from the {} at {}, {} records behind, position {}{})",
        body[field].as_array().map_or(0, Vec::len),
        body["role"].as_str().unwrap_or("?"),
        body["served_by"].as_str().unwrap_or("?"),
        body["lag_offsets"],
        body["position"],
        if body["more"] == true {
            "; more follow: --after the last key"
        } else {
            ""
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(encode("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(encode("k-1_x.y~"), "k-1_x.y~");
    }

    fn args(line: &[&str]) -> QueryArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            query: QueryArgs,
        }
        let mut all = vec!["query", "--server", "h:1"];
        all.extend_from_slice(line);
        Cli::try_parse_from(all).unwrap().query
    }

    #[test]
    fn each_kind_of_query_has_its_path() {
        let path = |line: &[&str]| path_of(&args(line)).map_err(|f| f.message);
        assert_eq!(
            path(&["counts", "a b", "--at-least", "lines:0:7"]).unwrap(),
            "/v1/stores/counts/keys/a%20b?timeout_ms=5000&at_least=lines%3A0%3A7"
        );
        assert_eq!(
            path(&[
                "views",
                "u1",
                "--windows",
                "--from",
                "60000",
                "--max-lag-ms",
                "9"
            ])
            .unwrap(),
            "/v1/stores/views/keys/u1/windows?from=60000&timeout_ms=5000&max_lag_ms=9"
        );
        assert_eq!(
            path(&[
                "counts",
                "--partition",
                "2",
                "--after",
                "k1",
                "--limit",
                "5"
            ])
            .unwrap(),
            "/v1/stores/counts/partitions/2/range?after=k1&limit=5&timeout_ms=5000"
        );
        assert!(path(&["views", "u1", "--windows", "--from", "soon"])
            .unwrap_err()
            .contains("--from \"soon\""));
        assert!(path(&["counts", "k", "--from", "a"])
            .unwrap_err()
            .contains("--windows or --partition"));
        assert!(path(&["counts", "--partition", "1", "--at-least", "t:0:1"])
            .unwrap_err()
            .contains("key lookup"));
    }
}
