//! Runs `optimize` on one case of benches/cases.json `reps` times and prints its cost: a fixed
//! workload for `valgrind --tool=callgrind` instruction counts (a development aid).
//!
//! `cargo run --release -p deinsum-path --example one_path -- CASE STRATEGY [REPS]`, printing
//! the fastest mean time of a batch of 10 calls (STRATEGY
//! `all`: each of the case's strategies in turn).

// As the binary and the Python extension: allocation is a visible part of a small search.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use deinsum_path::{optimize, PathOptions};

#[path = "../benches/cases.rs"]
mod cases;

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().expect("a case name");
    let strat = args.next().expect("a strategy");
    let reps: usize = args.next().map_or(1, |r| r.parse().expect("a count"));
    let case = cases::load(include_str!("../benches/cases.json"))
        .into_iter()
        .find(|c| c.name == name)
        .expect("a case of cases.json");
    let names = if strat == "all" {
        case.strategies.clone()
    } else {
        vec![strat]
    };
    for s in names {
        let opts = PathOptions::with_strategy(&s);
        let mut cost = None;
        // Fastest mean over batches of 10 calls (the machine is shared; the minimum is stable).
        let mut best = f64::INFINITY;
        for _ in 0..reps.div_ceil(10) {
            let t = std::time::Instant::now();
            for _ in 0..10.min(reps) {
                cost = Some(optimize(&case.einsum, &opts).expect("a path").flops);
            }
            best = best.min(t.elapsed().as_secs_f64() / 10.min(reps) as f64);
        }
        let cost = cost.expect("one rep at least");
        println!("{name} {s}: {cost} ({:.1} us per call)", best * 1e6);
    }
}
