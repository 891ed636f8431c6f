//! Query counters and latencies for `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histogram's buckets; `+Inf` follows.
const BUCKETS: [f64; 9] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

/// How a query ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Answered,
    Unavailable,
    BadRequest,
    NotFound,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Unavailable => "unavailable",
            Outcome::BadRequest => "bad_request",
            Outcome::NotFound => "not_found",
        }
    }
}

/// Who answered: this instance's copy, or one it forwarded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Route {
    Local,
    Forwarded,
    None,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Route::Local => "local",
            Route::Forwarded => "forwarded",
            Route::None => "none",
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// By (store, role that answered, route, outcome).
    counts: BTreeMap<(String, String, Route, Outcome), u64>,
    buckets: [u64; BUCKETS.len() + 1],
    sum_seconds: f64,
}

#[derive(Debug, Default)]
pub struct QueryMetrics(Mutex<Inner>);

impl QueryMetrics {
    pub fn record(&self, store: &str, role: &str, route: Route, outcome: Outcome, seconds: f64) {
        let mut i = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *i.counts
            .entry((store.to_owned(), role.to_owned(), route, outcome))
            .or_insert(0) += 1;
        let b = BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(BUCKETS.len());
        i.buckets[b] += 1;
        i.sum_seconds += seconds;
    }

    /// The Prometheus text for `instance`.
    pub fn render(&self, instance: &str) -> String {
        let i = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        out += "# HELP baton_queries_total Interactive queries by store, the role of the copy that answered, route and outcome.\n# TYPE baton_queries_total counter\n";
        for ((store, role, route, outcome), n) in &i.counts {
            let _ = writeln!(
                out,
                "baton_queries_total{{instance=\"{instance}\",store=\"{store}\",role=\"{role}\",route=\"{}\",outcome=\"{}\"}} {n}",
                route.as_str(),
                outcome.as_str()
            );
        }
        out += "# HELP baton_query_seconds Interactive query latency, as this instance answered it.\n# TYPE baton_query_seconds histogram\n";
        let mut cumulative = 0;
        for (b, n) in i.buckets.iter().enumerate() {
            cumulative += n;
            let le = BUCKETS.get(b).map_or("+Inf".to_owned(), |v| v.to_string());
            let _ = writeln!(
                out,
                "baton_query_seconds_bucket{{instance=\"{instance}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "baton_query_seconds_sum{{instance=\"{instance}\"}} {}\nbaton_query_seconds_count{{instance=\"{instance}\"}} {cumulative}",
            i.sum_seconds
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets_render() {
        let m = QueryMetrics::default();
        m.record("counts", "active", Route::Local, Outcome::Answered, 0.002);
        m.record("counts", "active", Route::Local, Outcome::Answered, 0.002);
        m.record("counts", "", Route::None, Outcome::Unavailable, 9.0);
        let text = m.render("a");
        assert!(text.contains("baton_queries_total{instance=\"a\",store=\"counts\",role=\"active\",route=\"local\",outcome=\"answered\"} 2"));
        assert!(text.contains("outcome=\"unavailable\"} 1"));
        assert!(text.contains("baton_query_seconds_bucket{instance=\"a\",le=\"0.0025\"} 2"));
        assert!(text.contains("baton_query_seconds_bucket{instance=\"a\",le=\"+Inf\"} 3"));
        assert!(text.contains("baton_query_seconds_count{instance=\"a\"} 3"));
    }
}
