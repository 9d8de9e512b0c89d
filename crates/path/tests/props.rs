//! Property tests on random einsums: exactness, ranking of strategies, memory limits, replay.

mod common;
use common::{brute_force, es};
use deinsum_expr::ParsedEinsum;
use deinsum_path::{
    evaluate, optimize, tree_from_linear, tree_from_ssa, CostModel, Count, Flops, PathOptions,
    StepShape, STRATEGY_NAMES,
};
use proptest::prelude::*;
use std::sync::Arc;

const LETTERS: &[char] = &['a', 'b', 'c', 'd', 'e', 'f', 'g'];

/// Random einsums: 2..=max operands of 1..=3 indices over 7 letters, extents 1..=4, and a
/// random subset of the used letters as output.
fn arb_einsum(max: usize) -> impl Strategy<Value = ParsedEinsum> {
    (
        prop::collection::vec(
            prop::collection::btree_set(0..LETTERS.len(), 1..=3),
            2..=max,
        ),
        prop::collection::vec(1..=4usize, LETTERS.len()),
        any::<u8>(),
    )
        .prop_map(|(ops, ext, outmask)| {
            let terms: Vec<String> = ops
                .iter()
                .map(|t| t.iter().map(|&i| LETTERS[i]).collect())
                .collect();
            let used: std::collections::BTreeSet<usize> = ops.iter().flatten().copied().collect();
            let out: String = used
                .iter()
                .filter(|&&i| outmask >> i & 1 == 1)
                .map(|&i| LETTERS[i])
                .collect();
            let sizes: Vec<(char, usize)> = LETTERS.iter().copied().zip(ext).collect();
            es(&format!("{}->{}", terms.join(","), out), &sizes, 1)
        })
}

/// Random einsums whose operands carry indices of their own: 2..=max operands over 4 shared
/// letters, about half with a private letter (in no other operand, not in the output) and
/// some with a repeated letter (a diagonal); extents 1..=5.
fn arb_einsum_with_own_indices(max: usize) -> impl Strategy<Value = ParsedEinsum> {
    (
        prop::collection::vec(
            (
                prop::collection::vec(0..4usize, 1..=3),
                any::<bool>(),
                any::<bool>(),
            ),
            2..=max,
        ),
        prop::collection::vec(1..=5usize, 4 + max),
        any::<u8>(),
    )
        .prop_map(|(ops, ext, outmask)| {
            const OWN: &[char] = &['u', 'v', 'w', 'x', 'y', 'z', 'U', 'V'];
            let terms: Vec<String> = ops
                .iter()
                .enumerate()
                .map(|(k, (t, own, diag))| {
                    let mut s: String = t.iter().map(|&i| LETTERS[i]).collect();
                    if *own {
                        s.push(OWN[k]);
                    }
                    if *diag {
                        s.push(LETTERS[t[0]]);
                    }
                    s
                })
                .collect();
            let out: String = LETTERS[..4]
                .iter()
                .enumerate()
                .filter(|&(i, c)| outmask >> i & 1 == 1 && terms.iter().any(|t| t.contains(*c)))
                .map(|(_, c)| *c)
                .collect();
            let sizes: Vec<(char, usize)> =
                LETTERS[..4].iter().chain(OWN).copied().zip(ext).collect();
            es(&format!("{}->{}", terms.join(","), out), &sizes, 1)
        })
}

fn opt(name: &str) -> PathOptions {
    PathOptions::with_strategy(name)
}

/// opt_einsum's FLOPs written against [`StepShape`] only, so the searches take the slow path.
struct SlowFlops;
impl CostModel for SlowFlops {
    fn name(&self) -> &str {
        "slow-flops"
    }
    fn step_cost(&self, step: &StepShape<'_>) -> f64 {
        let all = step.indices();
        let summed = all.iter().any(|c| !step.output.contains(c));
        step.size_of(&all) * if summed { 2.0 } else { 1.0 }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn optimal_equals_brute_force(e in arb_einsum(7)) {
        let info = optimize(&e, &opt("optimal")).unwrap();
        prop_assert_eq!(info.flops.exact(), brute_force(&e, None));
    }

    #[test]
    fn optimal_never_worse_and_auto_never_worse_than_greedy(e in arb_einsum(7)) {
        let best = optimize(&e, &opt("optimal")).unwrap().flops.as_f64();
        let greedy = optimize(&e, &opt("greedy")).unwrap().flops.as_f64();
        for s in STRATEGY_NAMES {
            let f = optimize(&e, &opt(s)).unwrap().flops.as_f64();
            prop_assert!(best <= f, "optimal {} > {} {}", best, s, f);
        }
        prop_assert!(optimize(&e, &opt("auto")).unwrap().flops.as_f64() <= greedy);
    }

    #[test]
    fn optimal_equals_brute_force_with_own_indices(e in arb_einsum_with_own_indices(6)) {
        let info = optimize(&e, &opt("optimal")).unwrap();
        prop_assert_eq!(info.flops.exact(), brute_force(&e, None));
        let replayed = evaluate(&e, tree_from_linear(&e, &info.path).unwrap(), &Flops, "optimal");
        prop_assert_eq!(replayed.flops, info.flops);
        for s in STRATEGY_NAMES {
            let f = optimize(&e, &opt(s)).unwrap().flops.as_f64();
            prop_assert!(info.flops.as_f64() <= f, "optimal {} > {} {}", info.flops, s, f);
        }
    }

    #[test]
    fn memory_limit_is_honoured(e in arb_einsum(6), limit in 1u128..=64) {
        let exact = brute_force(&e, Some(limit));
        let n = e.num_inputs();
        for s in STRATEGY_NAMES {
            let info = optimize(&e, &PathOptions { memory_limit: Some(limit), ..opt(s) }).unwrap();
            // opt_einsum's answer when no stepwise path fits: one step over every operand.
            let all_at_once = info.path == vec![(0..n).collect::<Vec<usize>>()];
            prop_assert!(
                all_at_once || info.largest_intermediate.as_f64() <= limit as f64,
                "{}", s
            );
            if exact.is_none() {
                prop_assert!(all_at_once, "{} found a path brute force says is impossible", s);
            }
        }
        let optimal = optimize(&e, &PathOptions { memory_limit: Some(limit), ..opt("optimal") })
            .unwrap();
        match exact {
            Some(f) => prop_assert_eq!(optimal.flops.exact(), Some(f)),
            None => prop_assert_eq!(optimal.path, vec![(0..n).collect::<Vec<usize>>()]),
        }
    }

    #[test]
    fn linear_and_ssa_paths_replay_to_the_reported_cost(e in arb_einsum(7)) {
        for s in STRATEGY_NAMES {
            let info = optimize(&e, &opt(s)).unwrap();
            let tree = tree_from_linear(&e, &info.path).unwrap();
            prop_assert_eq!(&tree, &info.tree);
            prop_assert_eq!(evaluate(&e, tree, &Flops, s).flops, info.flops);
            prop_assert_eq!(&tree_from_ssa(&e, &info.tree.to_ssa()).unwrap(), &info.tree);
            let last = info.tree.steps.last().unwrap();
            prop_assert_eq!(&last.output, e.output());
        }
    }

    #[test]
    fn custom_cost_model_matches_builtin(e in arb_einsum(6)) {
        for s in ["optimal", "dp", "branch-2", "auto"] {
            let fast = optimize(&e, &opt(s)).unwrap();
            let slow = optimize(&e, &PathOptions { cost: Arc::new(SlowFlops), ..opt(s) }).unwrap();
            prop_assert_eq!(fast.flops, slow.flops);
            prop_assert_eq!(slow.cost, slow.flops.as_f64());
        }
    }
}

#[test]
fn optimal_handles_sixteen_operands() {
    // A ring of 16 matrices with varying extents: finishes and matches dp's connected search
    // from above (optimal is exact, so it can only be cheaper or equal).
    let letters: Vec<char> = ('a'..='p').collect();
    let terms: Vec<String> = (0..16)
        .map(|k| format!("{}{}", letters[k], letters[(k + 1) % 16]))
        .collect();
    let sizes: Vec<(char, usize)> = letters
        .iter()
        .enumerate()
        .map(|(k, c)| (*c, 2 + (k * 7) % 5))
        .collect();
    let e = es(&format!("{}->ai", terms.join(",")), &sizes, 1);
    let best = optimize(&e, &opt("optimal")).unwrap();
    for s in ["dp", "greedy", "branch-1"] {
        let other = optimize(&e, &opt(s)).unwrap();
        assert!(best.flops.as_f64() <= other.flops.as_f64(), "{s}");
    }
    assert!(matches!(best.flops, Count::Exact(_)));
}

#[test]
fn results_are_deterministic() {
    let e = es(
        "ab,bc,cd,de,ea,ac,bd->",
        &[('a', 3), ('b', 4), ('c', 2), ('d', 5), ('e', 3)],
        1,
    );
    for s in STRATEGY_NAMES {
        let a = optimize(&e, &opt(s)).unwrap();
        let b = optimize(&e, &opt(s)).unwrap();
        assert_eq!(a, b, "{s}");
    }
}
