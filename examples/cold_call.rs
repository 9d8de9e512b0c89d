//! One cold call of `Einsum::run_local_borrowed` on the kernels of python/bench.py, timed
//! (min of N): what `deinsum.einsum` costs from Python, less the binding.
//!
//!     cargo run --release --example cold_call -- [KERNEL] [--repeat N] [--procs P] [--threads T] [--fresh]
//!
//! Prints per kernel the best wall time of a call, and per call on average the process's
//! minor page faults and CPU seconds (user + system, from /proc/self/stat): figures that the
//! load of a shared machine does not inflate. `--fresh` gives every call new buffers (what
//! a call cost before runs kept their buffers).
use deinsum::expr::ExtentSpec;
use deinsum::{Einsum, ExecOptions, Options};
use std::collections::BTreeMap;
use std::time::Instant;

fn arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A kernel: name, einsum, extents by index.
type Kernel = (&'static str, &'static str, &'static [(char, usize)]);

/// (minor page faults, CPU seconds) of this process so far.
fn usage() -> (u64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // minflt is field 10 of the line, utime 14, stime 15; `f` starts at field 3.
    (num(7), (num(11) + num(12)) as f64 / 100.0)
}

fn main() {
    let fresh = std::env::args().any(|a| a == "--fresh");
    let reps = arg("--repeat", 5);
    let procs = arg("--procs", 2);
    let threads = arg("--threads", 1);
    let kernels: [Kernel; 5] = [
        ("mm", "ij,jk->ik", &[('i', 2048), ('j', 2048), ('k', 2048)]),
        (
            "3mm",
            "ij,jk,kl->il",
            &[('i', 1024), ('j', 1024), ('k', 1024), ('l', 1024)],
        ),
        (
            "mttkrp",
            "ijk,ja,ka->ia",
            &[('i', 256), ('j', 256), ('k', 256), ('a', 32)],
        ),
        (
            "ttmc",
            "ijk,ja,kb->iab",
            &[('i', 128), ('j', 128), ('k', 128), ('a', 16), ('b', 16)],
        ),
        (
            "chain5",
            "ijk,ja,ka,al->il",
            &[('i', 64), ('j', 64), ('k', 64), ('a', 64), ('l', 64)],
        ),
    ];
    let only = std::env::args().nth(1).filter(|a| !a.starts_with("--"));
    for (name, expr, ext) in kernels {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let sizes: BTreeMap<char, usize> = ext.iter().copied().collect();
        let spec = ExtentSpec {
            sizes: sizes.clone(),
            ..ExtentSpec::default()
        };
        let e = Einsum::compile(expr, &spec, &Options::procs(procs)).expect("compiles");
        let ops: Vec<Vec<f64>> = e
            .plan()
            .einsum
            .inputs()
            .iter()
            .enumerate()
            .map(|(k, op)| {
                let n: usize = op.shape(e.plan().einsum.extents()).iter().product();
                (0..n)
                    .map(|x| deinsum::exec::data::seeded_value(1, k, x as u64))
                    .collect()
            })
            .collect();
        let lent: Vec<&[f64]> = ops.iter().map(|v| &v[..]).collect();
        let opts = || ExecOptions {
            threads,
            kept: fresh.then(deinsum::exec::buffers::KeptBuffers::new),
            ..ExecOptions::default()
        };
        let _ = e.run_local_borrowed(&lent, &opts()).expect("runs");
        let mut best = f64::INFINITY;
        let (f0, c0) = usage();
        for _ in 0..reps {
            let o = opts();
            let t0 = Instant::now();
            let out = e.run_local_borrowed(&lent, &o).expect("runs");
            best = best.min(t0.elapsed().as_secs_f64());
            drop(out);
        }
        let (f1, c1) = usage();
        println!(
            "{name}\t{expr}\tbest {:.3} ms\tfaults/call {}\tcpu/call {:.1} ms",
            best * 1e3,
            (f1 - f0) / reps as u64,
            (c1 - c0) / reps as f64 * 1e3
        );
    }
}
