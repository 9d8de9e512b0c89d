//! The 200-operand einsum written with opt_einsum's symbols (crates/expr/tests/data, made by
//! opt_einsum): every strategy that takes 200 operands finds a path, and the linear path
//! replays to the reported cost.

use deinsum_expr::{parse, ExtentSpec};
use deinsum_path::{evaluate, optimize, tree_from_linear, Flops, PathOptions};

const TABLE: &str = include_str!("../../expr/tests/data/opt_einsum_symbols.txt");

#[test]
fn a_200_operand_network_over_opt_einsum_symbols() {
    let rows: Vec<&str> = TABLE.lines().filter(|l| !l.starts_with('#')).collect();
    let expr: String = rows[1]
        .split(',')
        .map(|t| {
            t.split_whitespace()
                .map(|h| char::from_u32(u32::from_str_radix(h, 16).unwrap()).unwrap())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(",");
    // Extent 1 keeps the implicit output (some 60 indices) countable; costs stay exact.
    let e = parse(
        &expr,
        &ExtentSpec::from_flags(None, Some("1"), None).unwrap(),
    )
    .unwrap();
    assert_eq!(e.num_inputs(), 200);
    for s in ["greedy", "auto", "branch-1"] {
        let info = optimize(&e, &PathOptions::with_strategy(s)).unwrap();
        assert_eq!(
            info.path.len(),
            199,
            "{s}: one pairwise step per operand but one"
        );
        let tree = tree_from_linear(&e, &info.path).unwrap();
        assert_eq!(evaluate(&e, tree, &Flops, s).flops, info.flops, "{s}");
        assert_eq!(info.tree.steps.last().unwrap().output, e.output(), "{s}");
    }
}
