//! Splits `optimize`'s time into search and reporting (a development aid).

// As the binary and the Python extension: allocation is a visible part of a small search.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use deinsum_path::{evaluate, optimize, problem, strategy, tree_from_ssa, Flops, PathOptions};
use std::time::{Duration, Instant};

/// Fastest mean over 20 batches of `reps` calls (the machine is shared; the minimum is stable).
fn best(reps: u32, mut f: impl FnMut()) -> Duration {
    (0..20)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed() / reps
        })
        .min()
        .expect("20 batches")
}

#[path = "../benches/cases.rs"]
mod cases;

fn main() {
    let only = std::env::args().nth(1).unwrap_or_default();
    let strat = std::env::args().nth(2).unwrap_or_else(|| "greedy".into());
    let reps = 50;
    for case in cases::load(include_str!("../benches/cases.json")) {
        if !case.name.contains(&only) || !case.strategies.contains(&strat) {
            continue;
        }
        let opts = PathOptions::with_strategy(&strat);
        let s = strategy(&strat).unwrap();
        let search = best(reps, || {
            std::hint::black_box(s.search(&problem(&case.einsum, &opts)).unwrap());
        });
        let ssa = s.search(&problem(&case.einsum, &opts)).unwrap();
        let tree = best(reps, || {
            std::hint::black_box(tree_from_ssa(&case.einsum, &ssa).unwrap());
        });
        let tr = tree_from_ssa(&case.einsum, &ssa).unwrap();
        let eval = best(reps, || {
            std::hint::black_box(evaluate(&case.einsum, tr.clone(), &Flops, "x"));
        });
        let all = best(reps, || {
            std::hint::black_box(optimize(&case.einsum, &opts).unwrap());
        });
        // Parsing the string with per-operand shapes, as the Python binding does.
        let e = &case.einsum;
        let text = format!(
            "{}->{}",
            (0..e.num_inputs())
                .map(|k| e.input_subscripts(k))
                .collect::<Vec<_>>()
                .join(","),
            e.output_subscripts()
        );
        let spec = deinsum_expr::ExtentSpec {
            shapes: Some(e.inputs().iter().map(|o| o.shape(e.extents())).collect()),
            ..Default::default()
        };
        let parse = best(reps, || {
            std::hint::black_box(deinsum_expr::parse(&text, &spec).unwrap());
        });
        println!(
            "{} {strat}: parse {parse:?} search {search:?} tree {tree:?} evaluate {eval:?} optimize {all:?}",
            case.name
        );
    }
}
