//! The large scenario (1000 tasks with 1 GB each, 90 -> 100 instances) simulated to convergence.

use std::time::Duration;

use baton_simulator::{simulate, RunSpec, Scenario};
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/scenarios/large.toml"
    ))
    .unwrap();
    let scenario = Scenario::parse(&text).unwrap();
    let mut g = c.benchmark_group("large scenario to convergence");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    for spec in ["high-availability", "sticky@eager", "kafka"] {
        let run = RunSpec::parse(spec).unwrap();
        g.bench_function(spec, |b| b.iter(|| simulate(&scenario, &run, &mut |_| {})));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
