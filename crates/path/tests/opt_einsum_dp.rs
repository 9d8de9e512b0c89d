//! Held to opt_einsum's `dp` on einsums whose operands carry indices of their own (in no other
//! operand and not in the output, or repeated in one term), where summing them out of that
//! operand first pays. tests/data/opt_einsum_dp.py wrote the table with opt_einsum: our `dp`
//! and `auto` must cost no more than its path, and `optimal` no more than any of them.

mod common;
use common::es;
use deinsum_path::{evaluate, optimize, tree_from_linear, Flops, PathOptions};

const TABLE: &str = include_str!("data/opt_einsum_dp.txt");

#[test]
fn dp_auto_and_optimal_never_cost_more_than_opt_einsums_dp() {
    let mut n = 0;
    let mut cheaper = 0;
    for line in TABLE.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('|').collect();
        let sizes: Vec<(char, usize)> = f[1]
            .split(',')
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.chars().next().unwrap(), v.parse().unwrap())
            })
            .collect();
        let e = es(f[0], &sizes, 1);
        let theirs: u128 = f[2].parse().unwrap();
        let mut costs = Vec::new();
        for s in ["dp", "auto", "optimal"] {
            let info = optimize(&e, &PathOptions::with_strategy(s)).unwrap();
            // The cost is opt_einsum's count of the path we print, replayed from it.
            let replay = evaluate(&e, tree_from_linear(&e, &info.path).unwrap(), &Flops, s);
            assert_eq!(replay.flops, info.flops, "{line}: {s}");
            let ours = info.flops.exact().unwrap();
            assert!(
                ours <= theirs,
                "{line}: {s} costs {ours} > opt_einsum dp {theirs}"
            );
            costs.push(ours);
        }
        assert!(
            costs[2] <= costs[0] && costs[2] <= costs[1],
            "{line}: {costs:?}"
        );
        cheaper += usize::from(costs[0] < theirs);
        n += 1;
    }
    assert_eq!(n, 200);
    // Not a bound to hold, a sign the table exercises something: our dp keeps outer products.
    assert!(cheaper > 0);
}
