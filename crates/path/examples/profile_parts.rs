//! Splits `optimize`'s time into search and reporting (a development aid).

use deinsum_path::{evaluate, optimize, problem, strategy, tree_from_ssa, Flops, PathOptions};
use std::time::Instant;

#[path = "../benches/cases.rs"]
mod cases;

fn main() {
    let only = std::env::args().nth(1).unwrap_or_default();
    let strat = std::env::args().nth(2).unwrap_or_else(|| "greedy".into());
    let reps = 200;
    for case in cases::load(include_str!("../benches/cases.json")) {
        if !case.name.contains(&only) || !case.strategies.contains(&strat) {
            continue;
        }
        let opts = PathOptions::with_strategy(&strat);
        let s = strategy(&strat).unwrap();
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(s.search(&problem(&case.einsum, &opts)).unwrap());
        }
        let search = t.elapsed() / reps;
        let ssa = s.search(&problem(&case.einsum, &opts)).unwrap();
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(tree_from_ssa(&case.einsum, &ssa).unwrap());
        }
        let tree = t.elapsed() / reps;
        let tr = tree_from_ssa(&case.einsum, &ssa).unwrap();
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(evaluate(&case.einsum, tr.clone(), &Flops, "x"));
        }
        let eval = t.elapsed() / reps;
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(optimize(&case.einsum, &opts).unwrap());
        }
        let all = t.elapsed() / reps;
        println!(
            "{} {strat}: search {search:?} tree {tree:?} evaluate {eval:?} optimize {all:?}",
            case.name
        );
    }
}
