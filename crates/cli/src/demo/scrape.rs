//! What the demo learns from each instance: its `/metrics`, fetched and parsed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest response read; an instance's metrics are a few kilobytes.
const MAX_RESPONSE: u64 = 4 << 20;

/// One held task, as an instance reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub role: String,
    pub phase: String,
    pub lag: i64,
    /// Records per second the lag falls by, as the instance measures it (`None` until it has).
    pub rate: Option<f64>,
}

/// One instance's view of itself at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceView {
    /// Task id (`0_3`) → what the instance holds of it.
    pub held: BTreeMap<String, Held>,
    /// Rebalance reason → join rounds with that reason.
    pub rebalances: BTreeMap<String, u64>,
}

/// GETs `/metrics`; `None` when the instance does not answer (not up yet, or gone).
pub async fn scrape(addr: SocketAddr) -> Option<InstanceView> {
    let get = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut body = Vec::new();
        stream
            .take(MAX_RESPONSE)
            .read_to_end(&mut body)
            .await
            .ok()?;
        let text = String::from_utf8(body).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| parse(body))
    };
    tokio::time::timeout(Duration::from_secs(2), get)
        .await
        .ok()
        .flatten()
}

/// Reads the samples the demo shows; every other line is ignored.
pub fn parse(text: &str) -> InstanceView {
    let mut view = InstanceView::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        match name {
            "baton_task_held" => {
                let held = view.held.entry(label("task")).or_insert(Held {
                    role: String::new(),
                    phase: String::new(),
                    lag: 0,
                    rate: None,
                });
                held.role = label("role");
                held.phase = label("phase");
            }
            "baton_task_lag_records" => {
                if let Some(h) = view.held.get_mut(&label("task")) {
                    h.lag = value as i64;
                }
            }
            "baton_task_catchup_rate_records_per_second" => {
                if let Some(h) = view.held.get_mut(&label("task")) {
                    h.rate = Some(value);
                }
            }
            "baton_rebalance_seconds_count" => {
                view.rebalances.insert(label("reason"), value as u64);
            }
            _ => {}
        }
    }
    view
}

/// `name{k="v",...} value` → its parts; `None` for anything else.
fn sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let Some((name, rest)) = series.split_once('{') else {
        return Some((series, BTreeMap::new(), value));
    };
    let body = rest.strip_suffix('}')?;
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() {
            break;
        }
        if chars.next() != Some('"') {
            return None;
        }
        let mut v = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => v.push('\n'),
                    c => v.push(c),
                },
                '"' => break,
                c => v.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').to_owned(), v);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    Some((name, labels, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_held_tasks_lags_and_rebalances() {
        let text = "# HELP x\n\
            baton_task_held{instance=\"a\\\"b\",task=\"0_3\",role=\"warmup\",phase=\"restoring\"} 1\n\
            baton_task_lag_records{instance=\"a\\\"b\",task=\"0_3\",role=\"warmup\"} 4200\n\
            baton_task_catchup_rate_records_per_second{instance=\"a\\\"b\",task=\"0_3\",role=\"warmup\"} 350.5\n\
            baton_task_held{instance=\"a\\\"b\",task=\"0_1\",role=\"active\",phase=\"running\"} 1\n\
            baton_rebalance_seconds_count{instance=\"a\\\"b\",reason=\"warm-up caught up\"} 2\n\
            baton_heartbeat_gap_max_seconds{instance=\"a\\\"b\",thread=\"t0\"} 0.300\n";
        let v = parse(text);
        assert_eq!(
            v.held["0_3"],
            Held {
                role: "warmup".into(),
                phase: "restoring".into(),
                lag: 4200,
                rate: Some(350.5)
            }
        );
        assert_eq!(v.held["0_1"].role, "active");
        assert_eq!(v.rebalances["warm-up caught up"], 2);
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let v = parse("baton_task_held{task=\"0_1 1\nbaton_task_held{task=0_1} 1\nnonsense\n");
        assert!(v.held.is_empty());
    }
}
