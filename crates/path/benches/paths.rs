//! Path search speed on the equations of cases.json (compare with opt_einsum_baseline.py).

use criterion::{criterion_group, criterion_main, Criterion};
use deinsum_path::{optimize, PathOptions};
use std::time::Duration;

mod cases;

fn bench(c: &mut Criterion) {
    for case in cases::load(include_str!("cases.json")) {
        let mut g = c.benchmark_group(&case.name);
        g.sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        for s in &case.strategies {
            let opts = PathOptions::with_strategy(s);
            g.bench_function(s.as_str(), |b| {
                b.iter(|| optimize(&case.einsum, &opts).expect("a path"))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
