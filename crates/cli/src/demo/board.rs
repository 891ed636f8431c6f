//! What the demo shows while it runs: a log of what changed (who processes each task,
//! warm-ups starting and catching up, rebalances and their reasons) and, on a terminal, a
//! panel redrawn below it with each task's owner, its longest gap so far, and each warm-up's
//! lag, restore rate and ETA.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use super::scrape::InstanceView;

/// A warm-up being watched: its lag and how fast it falls.
struct Warmup {
    lag: i64,
    /// Records per second the lag falls by, as its instance measures it.
    rate: Option<f64>,
}

pub struct Board {
    run: String,
    started: Instant,
    step: String,
    tasks: Vec<String>,
    tty: bool,
    drawn: usize,
    /// Task → the instance that holds its active, and the phase.
    owners: BTreeMap<String, (String, String)>,
    /// Output partition → (end offset, when it last grew).
    output: BTreeMap<i32, (i64, Instant)>,
    longest_gap_s: BTreeMap<i32, f64>,
    measuring: bool,
    warmups: BTreeMap<(String, String), Warmup>,
    rebalances: BTreeMap<String, u64>,
    pub warmups_seen: usize,
    pub handovers: usize,
}

impl Board {
    pub fn new(run: &str, partitions: u32, tty: bool) -> Board {
        Board {
            run: run.to_owned(),
            started: Instant::now(),
            step: String::new(),
            tasks: (0..partitions).map(|p| format!("0_{p}")).collect(),
            tty,
            drawn: 0,
            owners: BTreeMap::new(),
            output: BTreeMap::new(),
            longest_gap_s: BTreeMap::new(),
            measuring: false,
            warmups: BTreeMap::new(),
            rebalances: BTreeMap::new(),
            warmups_seen: 0,
            handovers: 0,
        }
    }

    /// A new step of the script, logged.
    pub fn step(&mut self, what: &str) {
        self.step = what.to_owned();
        self.log(what);
    }

    /// From now on, a partition whose output stalls counts as a gap.
    pub fn start_measuring(&mut self) {
        let now = Instant::now();
        for (_, at) in self.output.values_mut() {
            *at = now;
        }
        self.measuring = true;
    }

    pub fn stop_measuring(&mut self) {
        self.measuring = false;
    }

    pub fn log(&mut self, line: &str) {
        self.erase();
        println!("[{:>6.1} s] {}", self.started.elapsed().as_secs_f64(), line);
        self.draw();
    }

    /// Takes in one round of observations: each instance's metrics and the output's ends.
    pub fn update(
        &mut self,
        views: &BTreeMap<String, InstanceView>,
        output_ends: &BTreeMap<i32, i64>,
    ) {
        self.track_output(output_ends);
        let mut events = Vec::new();
        for (instance, view) in views {
            for (task, held) in &view.held {
                match held.role.as_str() {
                    "active" => {
                        let owner = (instance.clone(), held.phase.clone());
                        match self.owners.insert(task.clone(), owner) {
                            Some((before, _)) if &before != instance => {
                                self.handovers += 1;
                                events.push(format!(
                                    "{task}: now processed by {instance} (was {before})"
                                ));
                            }
                            None => events.push(format!("{task}: processed by {instance}")),
                            _ => {}
                        }
                    }
                    "warmup" => self.warmup_seen(instance, task, held, &mut events),
                    _ => {}
                }
            }
        }
        let ended: Vec<(String, String)> = self
            .warmups
            .keys()
            .filter(|(i, t)| {
                views
                    .get(i)
                    .and_then(|v| v.held.get(t))
                    .is_none_or(|h| h.role != "warmup")
            })
            .cloned()
            .collect();
        for key in ended {
            self.warmups.remove(&key);
            let (instance, task) = key;
            events.push(format!("{task}: warm-up on {instance} caught up"));
        }
        let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
        for view in views.values() {
            for (reason, &n) in &view.rebalances {
                let r = reasons.entry(reason.clone()).or_insert(0);
                *r = (*r).max(n);
            }
        }
        for (reason, &n) in &reasons {
            let before = self.rebalances.get(reason).copied().unwrap_or(0);
            if n > before {
                events.push(format!("rebalance ({reason})"));
                self.rebalances.insert(reason.clone(), n);
            }
        }
        for e in events {
            self.log(&e);
        }
        self.erase();
        self.draw();
    }

    /// When each output partition last grew; while measuring, the longest it stood still.
    fn track_output(&mut self, output_ends: &BTreeMap<i32, i64>) {
        let now = Instant::now();
        for (&p, &end) in output_ends {
            let entry = self.output.entry(p).or_insert((end, now));
            if end > entry.0 {
                *entry = (end, now);
            } else if self.measuring {
                let gap = now.duration_since(entry.1).as_secs_f64();
                let longest = self.longest_gap_s.entry(p).or_insert(0.0);
                *longest = longest.max(gap);
            }
        }
    }

    /// A warm-up in a round's view: its progress, or its start (an event).
    fn warmup_seen(
        &mut self,
        instance: &str,
        task: &str,
        held: &crate::demo::scrape::Held,
        events: &mut Vec<String>,
    ) {
        let key = (instance.to_owned(), task.to_owned());
        match self.warmups.get_mut(&key) {
            Some(w) => {
                w.lag = held.lag;
                w.rate = held.rate;
            }
            None => {
                self.warmups_seen += 1;
                // A lag of 0 is "not measured yet": the store has not
                // read its changelog's end.
                events.push(if held.lag > 0 {
                    format!(
                        "{task}: warm-up on {instance} starts, {} records behind",
                        held.lag
                    )
                } else {
                    format!("{task}: warm-up on {instance} starts")
                });
                self.warmups.insert(
                    key,
                    Warmup {
                        lag: held.lag,
                        rate: held.rate,
                    },
                );
            }
        }
    }

    fn erase(&mut self) {
        if self.tty && self.drawn > 0 {
            print!("\x1b[{}F\x1b[J", self.drawn);
            self.drawn = 0;
        }
    }

    fn draw(&mut self) {
        if !self.tty {
            return;
        }
        let lines = self.panel();
        let mut out = std::io::stdout().lock();
        for l in &lines {
            let _ = writeln!(out, "{l}");
        }
        let _ = out.flush();
        self.drawn = lines.len();
    }

    fn panel(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "── {} · {:.0} s · {}",
            self.run,
            self.started.elapsed().as_secs_f64(),
            self.step
        )];
        let rows: Vec<Vec<String>> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(p, t)| {
                let owner = self
                    .owners
                    .get(t)
                    .map(|(i, phase)| format!("{i} ({phase})"))
                    .unwrap_or_else(|| "-".into());
                let gap = self
                    .longest_gap_s
                    .get(&(p as i32))
                    .map(|g| format!("{g:.1}"))
                    .unwrap_or_else(|| "-".into());
                vec![t.clone(), owner, gap]
            })
            .collect();
        let table = crate::columns::render(&["TASK", "ACTIVE ON", "LONGEST GAP s"], &rows);
        lines.extend(table.lines().map(str::to_owned));
        if !self.warmups.is_empty() {
            let rows: Vec<Vec<String>> = self
                .warmups
                .iter()
                .map(|((i, t), w)| {
                    let (rate, eta) = match w.rate {
                        Some(r) if r > 0.0 => {
                            (format!("{r:.0}"), format!("{:.1}", w.lag as f64 / r))
                        }
                        Some(r) => (format!("{r:.0}"), "never".into()),
                        None => ("-".into(), "-".into()),
                    };
                    vec![t.clone(), i.clone(), w.lag.to_string(), rate, eta]
                })
                .collect();
            let table =
                crate::columns::render(&["WARM-UP", "ON", "LAG", "RESTORED/s", "ETA s"], &rows);
            lines.extend(table.lines().map(str::to_owned));
        }
        if !self.rebalances.is_empty() {
            let list: Vec<String> = self
                .rebalances
                .iter()
                .map(|(r, n)| format!("{r} ×{n}"))
                .collect();
            lines.push(format!("rebalances: {}", list.join(", ")));
        }
        lines
    }

    /// Join rounds seen, by the instance that saw most of each reason.
    pub fn rebalances(&self) -> u64 {
        self.rebalances.values().sum()
    }

    /// Clears the panel for good (before the summary).
    pub fn finish(&mut self) {
        self.erase();
    }
}
