//! Hand-computed costs and trees.

mod common;
use common::{brute_force, es};
use deinsum_expr::{Operand, ParsedEinsum};
use deinsum_path::{
    evaluate, optimize, tree_from_linear, Count, Flops, PathError, PathOptions, STRATEGY_NAMES,
};

fn opt(name: &str) -> PathOptions {
    PathOptions::with_strategy(name)
}

fn einsums(info: &deinsum_path::PathInfo) -> Vec<String> {
    info.steps.iter().map(|s| s.einsum.clone()).collect()
}

#[test]
fn issue_example_best_tree() {
    let e = es("ijk,ja,ka,al->il", &[], 10);
    let info = optimize(&e, &opt("optimal")).unwrap();
    // ja,ka->jka: 10^3 (a is still needed); ijk,jka->ia: 2*10^4; ia,al->il: 2*10^3.
    assert_eq!(info.flops, Count::Exact(1_000 + 20_000 + 2_000));
    assert_eq!(einsums(&info), ["ja,ka->jka", "ijk,jka->ia", "ia,al->il"]);
    assert_eq!(info.path, vec![vec![1, 2], vec![0, 2], vec![1, 0]]);
    assert_eq!(info.largest_intermediate, Count::Exact(1_000));
    // naive: 5 indices, 4 operands, shared indices: 10^5 * (3 + 1).
    assert_eq!(info.naive_flops, Count::Exact(400_000));
    assert_eq!(brute_force(&e, None), Some(23_000));
}

#[test]
fn matrix_chain_three() {
    // A 10x100, B 100x5, C 5x50: (AB)C = 2*10*100*5 + 2*10*5*50 = 15000; A(BC) = 150000.
    let e = es(
        "ab,bc,cd->ad",
        &[('a', 10), ('b', 100), ('c', 5), ('d', 50)],
        1,
    );
    for s in STRATEGY_NAMES {
        let info = optimize(&e, &opt(s)).unwrap();
        assert_eq!(info.flops, Count::Exact(15_000), "strategy {s}");
        assert_eq!(einsums(&info)[0], "ab,bc->ac", "strategy {s}");
        assert_eq!(info.multiply_adds, Count::Exact(7_500));
    }
}

#[test]
fn matrix_chain_six_textbook() {
    // CLRS 15.2: dims 30,35,15,5,10,20,25 -> 15125 scalar multiplications, ((A1(A2A3))((A4A5)A6)).
    let e = es(
        "ab,bc,cd,de,ef,fg->ag",
        &[
            ('a', 30),
            ('b', 35),
            ('c', 15),
            ('d', 5),
            ('e', 10),
            ('f', 20),
            ('g', 25),
        ],
        1,
    );
    let info = optimize(&e, &opt("optimal")).unwrap();
    assert_eq!(info.multiply_adds, Count::Exact(15_125));
    assert_eq!(info.flops, Count::Exact(2 * 15_125));
    let dp = optimize(&e, &opt("dp")).unwrap();
    assert_eq!(dp.flops, Count::Exact(2 * 15_125));
    assert_eq!(brute_force(&e, None), Some(2 * 15_125));
}

#[test]
fn outer_product_and_hadamard_and_batch() {
    let outer = optimize(&es("i,j->ij", &[('i', 3), ('j', 4)], 1), &opt("auto")).unwrap();
    assert_eq!(outer.flops, Count::Exact(12));
    assert_eq!(outer.naive_flops, Count::Exact(12));
    assert_eq!(einsums(&outer), ["i,j->ij"]);

    let had = optimize(&es("ij,ij->ij", &[('i', 3), ('j', 4)], 1), &opt("greedy")).unwrap();
    assert_eq!(had.flops, Count::Exact(12));
    // naive: both operands share i and j: 12 * (1 + 1).
    assert_eq!(had.naive_flops, Count::Exact(24));

    let batch = optimize(
        &es("bij,bjk->bik", &[('b', 2), ('i', 3), ('j', 4), ('k', 5)], 1),
        &opt("dp"),
    )
    .unwrap();
    assert_eq!(batch.flops, Count::Exact(2 * 2 * 3 * 4 * 5));
    assert_eq!(batch.largest_intermediate, Count::Exact(30));
}

#[test]
fn outer_product_that_pays() {
    // i,j -> ij (4 flops), then ij,ijk->k (2*400) = 804; the connected order costs 1200.
    let e = es("i,j,ijk->k", &[('i', 2), ('j', 2), ('k', 100)], 1);
    assert_eq!(brute_force(&e, None), Some(804));
    for s in ["optimal", "dp", "auto"] {
        let info = optimize(&e, &opt(s)).unwrap();
        assert_eq!(info.flops, Count::Exact(804), "strategy {s}");
        assert_eq!(einsums(&info)[0], "i,j->ij", "strategy {s}");
    }
}

#[test]
fn single_operand_is_one_unary_step() {
    let e = es("ij->i", &[('i', 3), ('j', 4)], 1);
    for s in STRATEGY_NAMES {
        let info = optimize(&e, &opt(s)).unwrap();
        assert_eq!(info.tree.steps.len(), 1);
        assert_eq!(info.tree.steps[0].operands, vec![deinsum_path::NodeId(0)]);
        assert_eq!(einsums(&info), ["ij->i"]);
        assert_eq!(info.path, vec![vec![0]]);
        assert_eq!(info.flops, Count::Exact(24)); // 12 * (1 + summed)
    }
}

#[test]
fn index_of_one_operand_is_summed_where_it_is_consumed() {
    // k is only in the first operand: summed in the step that reads it.
    let e = es("ijk,jl,lm->im", &[], 3);
    let info = optimize(&e, &opt("optimal")).unwrap();
    for step in &info.tree.steps {
        if step.operand_indices.iter().any(|t| t.contains(&'k')) {
            assert!(!step.output.contains(&'k'));
        }
    }
    assert_eq!(info.tree.steps.last().unwrap().output, vec!['i', 'm']);
    assert_eq!(info.flops.exact(), brute_force(&e, None));
}

#[test]
fn final_step_has_the_output_order() {
    let e = es("ab,bc->ca", &[], 4);
    let info = optimize(&e, &opt("greedy")).unwrap();
    assert_eq!(einsums(&info), ["ab,bc->ca"]);
    let e = es("ab,bc,cd->da", &[], 4);
    let info = optimize(&e, &opt("optimal")).unwrap();
    assert_eq!(info.tree.steps.last().unwrap().output, vec!['d', 'a']);
}

#[test]
fn memory_limit_forces_the_other_order_or_one_step() {
    let e = es(
        "ab,bc,cd->ad",
        &[('a', 10), ('b', 100), ('c', 5), ('d', 50)],
        1,
    );
    // ac (50 elements) fits 100, bd (5000) does not; the output ad is 500 elements.
    let ok = optimize(
        &e,
        &PathOptions {
            memory_limit: Some(500),
            ..opt("optimal")
        },
    )
    .unwrap();
    assert_eq!(ok.flops, Count::Exact(15_000));
    // Below the output's size no stepwise path fits: opt_einsum's one step over everything.
    for s in STRATEGY_NAMES {
        let info = optimize(
            &e,
            &PathOptions {
                memory_limit: Some(499),
                ..opt(s)
            },
        )
        .unwrap();
        assert_eq!(info.path, vec![vec![0, 1, 2]], "{s}");
        assert!(info.tree.has_multi_operand_step());
        assert_eq!(einsums(&info), ["ab,bc,cd->ad"], "{s}");
        // opt_einsum's count: 10*100*5*50 elements, 2 products, and a sum.
        assert_eq!(info.flops, Count::Exact(250_000 * 3), "{s}");
    }
    // With A 10x100, B 100x10, C 10x10: AB is 100 elements; BC is 1000 and over 200.
    let e = es(
        "ab,bc,cd->ad",
        &[('a', 10), ('b', 100), ('c', 10), ('d', 10)],
        1,
    );
    for s in STRATEGY_NAMES {
        let info = optimize(
            &e,
            &PathOptions {
                memory_limit: Some(200),
                ..opt(s)
            },
        )
        .unwrap();
        assert_eq!(einsums(&info)[0], "ab,bc->ac", "{s}");
        assert_eq!(info.largest_intermediate, Count::Exact(100), "{s}");
    }
}

#[test]
fn unknown_strategy_is_an_error() {
    let e = es("ab,bc->ac", &[], 2);
    let err = optimize(&e, &opt("fastest")).unwrap_err();
    assert!(err.to_string().contains("unknown path strategy `fastest`"));
    assert!(err.to_string().contains("greedy"));
}

#[test]
fn linear_path_round_trip_and_errors() {
    let e = es("ijk,ja,ka,al->il", &[], 10);
    let info = optimize(&e, &opt("optimal")).unwrap();
    let tree = tree_from_linear(&e, &info.path).unwrap();
    assert_eq!(tree, info.tree);
    let again = evaluate(&e, tree, &Flops, "replay");
    assert_eq!(again.flops, info.flops);
    assert!(matches!(
        tree_from_linear(&e, &[vec![0, 0]]),
        Err(PathError::InvalidPath(_))
    ));
    assert!(matches!(
        tree_from_linear(&e, &[vec![0, 9]]),
        Err(PathError::InvalidPath(_))
    ));
    assert!(matches!(
        tree_from_linear(&e, &[vec![0, 1]]),
        Err(PathError::InvalidPath(_))
    ));
    assert!(matches!(
        tree_from_linear(&e, &[vec![0, 1, 2]]),
        Err(PathError::InvalidPath(_))
    ));
}

#[test]
fn costs_beyond_u128_are_approximate() {
    // 40 indices of extent 10^3 in one outer product: 10^120 > u128::MAX.
    let letters: String = ('a'..='z').chain('A'..='N').collect();
    let (x, y) = letters.split_at(20);
    let e = es(&format!("{x},{y}->{letters}"), &[], 1000);
    let info = optimize(&e, &opt("greedy")).unwrap();
    assert!(matches!(info.flops, Count::Approx(v) if (v / 1e120 - 1.0).abs() < 1e-9));
}

#[test]
fn scalar_operands_and_disconnected_parts() {
    // A scalar operand and two disconnected matrix products: joined by outer products.
    let e = es("a,,ab,cd,de->be", &[], 3);
    let best = brute_force(&e, None);
    for s in STRATEGY_NAMES {
        let info = optimize(&e, &opt(s)).unwrap();
        // Four pairwise steps; 'c', which only `cd` has, may be summed out of it first.
        let pairwise = info.tree.steps.iter().filter(|st| st.operands.len() == 2);
        assert_eq!(pairwise.count(), 4, "{s}");
        assert!(info.tree.steps.len() <= 5, "{s}");
        assert_eq!(
            info.tree.steps.last().unwrap().output,
            vec!['b', 'e'],
            "{s}"
        );
        assert!(info.flops.exact() >= best, "{s}");
    }
    assert_eq!(optimize(&e, &opt("optimal")).unwrap().flops.exact(), best);
}

#[test]
fn output_larger_than_the_limit_gives_one_step_over_everything() {
    // As opt_einsum: no step fits, so the path is the single step over all operands.
    let e = es("ab,bc,cd->ad", &[], 10);
    for s in STRATEGY_NAMES {
        let info = optimize(
            &e,
            &PathOptions {
                memory_limit: Some(99),
                ..opt(s)
            },
        )
        .unwrap();
        assert_eq!(info.path, vec![vec![0, 1, 2]], "{s}");
        assert_eq!(info.largest_intermediate, Count::Exact(100), "{s}");
    }
    let e = es("ab->a", &[], 10);
    let info = optimize(
        &e,
        &PathOptions {
            memory_limit: Some(9),
            ..opt("auto")
        },
    )
    .unwrap();
    assert_eq!(info.path, vec![vec![0]]);
}

#[test]
fn invalid_hand_built_einsums_are_errors() {
    let base = es("ab,bc->ac", &[], 2);
    let with = |inputs: &[Operand], output: &[char]| {
        ParsedEinsum::from_parts(inputs.to_vec(), output.to_vec(), base.extents().clone())
    };
    let e = with(base.inputs(), &['a', 'z']);
    assert!(matches!(
        optimize(&e, &opt("auto")),
        Err(PathError::InvalidEinsum(_))
    ));
    let e = with(base.inputs(), &['a', 'a']);
    assert!(matches!(
        optimize(&e, &opt("auto")),
        Err(PathError::InvalidEinsum(_))
    ));
    let e = with(&[], &['a', 'a']);
    assert!(matches!(
        optimize(&e, &opt("auto")),
        Err(PathError::InvalidEinsum(_))
    ));
}

#[test]
fn auto_bands_and_never_lose_to_greedy() {
    use deinsum_path::strategy::Auto;
    // Exact up to 8 operands, dp where opt_einsum runs branch-1 (so never above opt_einsum's
    // dp), greedy from 15 on.
    let names: Vec<(usize, String)> = [1, 4, 8, 9, 14, 15, 40]
        .iter()
        .map(|&n| (n, Auto::choice(n).name().to_string()))
        .collect();
    assert_eq!(
        names,
        [
            (1, "optimal"),
            (4, "optimal"),
            (8, "optimal"),
            (9, "dp"),
            (14, "dp"),
            (15, "greedy"),
            (40, "greedy"),
        ]
        .map(|(n, s)| (n, s.to_string()))
    );
    // Rings of matrices with uneven extents, in each band: auto is the cheaper of its choice
    // and greedy.
    let letters: Vec<char> = ('a'..='t').collect();
    for n in [6, 10, 12, 16] {
        let terms: Vec<String> = (0..n)
            .map(|k| format!("{}{}", letters[k], letters[(k + 1) % n]))
            .collect();
        let ext: Vec<(char, usize)> = (0..n).map(|k| (letters[k], 2 + (k * 7) % 11)).collect();
        let e = es(&format!("{}->", terms.join(",")), &ext, 1);
        let auto = optimize(&e, &opt("auto")).unwrap().flops.as_f64();
        let greedy = optimize(&e, &opt("greedy")).unwrap().flops.as_f64();
        let chosen = optimize(&e, &opt(Auto::choice(n).name()))
            .unwrap()
            .flops
            .as_f64();
        assert_eq!(auto, chosen.min(greedy), "{n} operands");
    }
}
