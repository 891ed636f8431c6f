//! CPU time of this process and of the broker, read from `/proc/<pid>/stat` (Linux; in
//! USER_HZ ticks of 10 ms): what a measured span cost, not only how long it took.

/// CPU seconds used so far by this process and, when the bench started it, the broker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CpuAt {
    here: Option<f64>,
    broker: Option<f64>,
}

impl CpuAt {
    pub(crate) fn now(broker: Option<u32>) -> CpuAt {
        CpuAt {
            here: cpu_seconds(std::process::id()),
            broker: broker.and_then(cpu_seconds),
        }
    }

    /// CPU seconds a million records cost between `self` and `later`, here and in the
    /// broker (`None`: not known, as without `/proc` or with a broker not started here).
    pub(crate) fn per_million(&self, later: &CpuAt, records: u64) -> (Option<f64>, Option<f64>) {
        let per = |a: Option<f64>, b: Option<f64>| {
            let spent = b? - a?;
            (records > 0).then(|| spent / records as f64 * 1e6)
        };
        (per(self.here, later.here), per(self.broker, later.broker))
    }
}

fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// utime and stime of a `stat` line, in seconds: fields 12 and 13 after the command name,
/// which may hold spaces and parentheses (so the last `)` ends it).
fn parse_stat(stat: &str) -> Option<f64> {
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_and_system_time_whatever_the_command_name() {
        let line = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9";
        assert_eq!(parse_stat(line), Some(3.25));
        assert_eq!(parse_stat("4242 (short) S 1"), None, "too few fields");
        assert_eq!(parse_stat("no command name"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu_and_a_span_divides_by_its_records() {
        let start = CpuAt::now(None);
        let mut x = 0u64;
        for i in 0..30_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let end = CpuAt::now(None);
        let (here, broker) = start.per_million(&end, 1_000_000);
        assert!(here.is_some_and(|s| s >= 0.0), "{here:?}");
        assert_eq!(broker, None, "no broker started here");
        assert_eq!(start.per_million(&end, 0).0, None);
    }
}
