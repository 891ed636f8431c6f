//! Whole runs of shipped scenarios: every thread a runtime state machine, every round the
//! leader's pipeline. `large` (1000 tasks with 1 GB each, 90 -> 100 instances) to convergence
//! with Baton's assignor and the pre-KIP baseline; Kafka's assignor, which does not converge
//! on `large` within its six simulated hours, on `scale-out-wide` (60 tasks, 3 -> 4).

use std::time::Duration;

use baton_simulator::{simulate, RunSpec, Scenario};
use criterion::{criterion_group, criterion_main, Criterion};

fn scenario(name: &str) -> Scenario {
    let path = format!(
        "{}/../../examples/scenarios/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("simulate");
    g.sample_size(10).measurement_time(Duration::from_secs(30));
    for (name, spec) in [
        ("large", "high-availability"),
        ("large", "sticky@eager"),
        ("scale-out-wide", "high-availability"),
        ("scale-out-wide", "kafka"),
    ] {
        let sc = scenario(name);
        let run = RunSpec::parse(spec).unwrap();
        g.bench_function(format!("{name} {spec}"), |b| {
            b.iter(|| simulate(&sc, &run, &mut |_| {}))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
