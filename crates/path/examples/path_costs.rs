//! Prints, as JSON, the FLOPs and linear path every strategy finds on each equation of
//! benches/cases.json, so opt_einsum_baseline.py can replay the paths through opt_einsum.

use deinsum_path::{optimize, Count, PathOptions};
use std::collections::BTreeMap;

#[path = "../benches/cases.rs"]
mod cases;

#[derive(serde::Serialize)]
struct Found {
    flops: Count,
    largest_intermediate: Count,
    path: Vec<Vec<usize>>,
}

fn main() {
    // Optional filter: only the cases whose name contains the first argument.
    let only = std::env::args().nth(1).unwrap_or_default();
    let mut out: BTreeMap<String, BTreeMap<String, Found>> = BTreeMap::new();
    for case in cases::load(include_str!("../benches/cases.json")) {
        if !case.name.contains(&only) {
            continue;
        }
        let per = out.entry(case.name.clone()).or_default();
        for s in &case.strategies {
            let t = std::time::Instant::now();
            let info = optimize(&case.einsum, &PathOptions::with_strategy(s)).expect("a path");
            eprintln!("{} {s}: {:?}", case.name, t.elapsed());
            per.insert(
                s.clone(),
                Found {
                    flops: info.flops,
                    largest_intermediate: info.largest_intermediate,
                    path: info.path,
                },
            );
        }
    }
    // Written directly (not via serde_json::Value) so counts above u64 stay exact.
    println!("{}", serde_json::to_string(&out).expect("serializable"));
}
