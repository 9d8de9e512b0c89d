//! Times `Einsum::compile` as the Python binding calls it (in-process ranks on this host):
//! `cargo run --release --example compile_time -- EXPR SIZES P [REPEATS]`; prints the first
//! compile's time and the least of the repeats.

use deinsum::expr::ExtentSpec;
use deinsum::{Einsum, Options};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let spec = ExtentSpec::from_flags(Some(&a[2]), None, None).expect("sizes");
    let procs: usize = a[3].parse().expect("P");
    let repeats: usize = a.get(4).map_or(20, |r| r.parse().expect("REPEATS"));
    let opts = Options::procs_on_this_host(procs);
    let t = Instant::now();
    let first = Einsum::compile(&a[1], &spec, &opts).expect("compile");
    let t_first = t.elapsed();
    let mut least = t_first;
    for _ in 0..repeats {
        let t = Instant::now();
        let e = Einsum::compile(&a[1], &spec, &opts).expect("compile");
        least = least.min(t.elapsed());
        assert_eq!(e.plan().groups.len(), first.plan().groups.len());
    }
    println!(
        "first {:.3} ms, least of {repeats} {:.3} ms; {} groups, predicted {:.3e} s",
        t_first.as_secs_f64() * 1e3,
        least.as_secs_f64() * 1e3,
        first.plan().groups.len(),
        first.plan().prediction.seconds
    );
}
