//! The I/O path: a tree chosen for I/O never moves more than the flops tree after fusion.

use deinsum_expr::{parse, ExtentSpec};
use deinsum_path::{optimize, PathOptions};
use deinsum_soap::{analyze, io_optimal};
use proptest::prelude::*;

fn fused_q(expr: &str, sizes: &str, s: f64) -> (f64, f64) {
    let spec = ExtentSpec::from_flags(Some(sizes), None, None).unwrap();
    let e = parse(expr, &spec).unwrap();
    let opts = PathOptions::default();
    let flops = analyze(&optimize(&e, &opts).unwrap().tree, s)
        .unwrap()
        .q_total;
    let (_, io) = io_optimal(&e, &opts, s).unwrap();
    (io.q_total, flops)
}

#[test]
fn mttkrp_io_path_is_the_fused_one() {
    // Issue 14: the per-step I/O cost chose ijk,ka->ija first (Q 1,323,008 after fusion).
    let (io, flops) = fused_q("ijk,ja,ka->ia", "i=64,j=64,k=64,a=64", 4096.0);
    for q in [flops, io] {
        assert!((q - 278_528.0).abs() < 1e-6 * q, "{q}");
    }
}

/// Einsums of 3 to 5 operands over the indices a..f with 1 or 2 indices per operand beyond a
/// shared chain, so every one is connected.
fn einsum_strategy() -> impl Strategy<Value = (String, String, f64)> {
    (3usize..=5, prop::collection::vec(2usize..=24, 8), 0usize..3).prop_map(|(n, ext, mem)| {
        let idx: Vec<char> = "abcdefgh".chars().collect();
        // A chain a b, b c, c d, ... with an extra index on the first operand.
        let mut ops: Vec<String> = (0..n)
            .map(|k| format!("{}{}", idx[k], idx[k + 1]))
            .collect();
        ops[0].push(idx[n + 1]);
        let out = format!("{}{}", idx[0], idx[n]);
        let sizes: Vec<String> = idx[..n + 2]
            .iter()
            .zip(&ext)
            .map(|(c, e)| format!("{c}={e}"))
            .collect();
        let s = [64.0, 512.0, 4096.0][mem];
        (format!("{}->{out}", ops.join(",")), sizes.join(","), s)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(32)
    ))]
    #[test]
    fn io_path_never_moves_more_than_the_flops_path((expr, sizes, s) in einsum_strategy()) {
        let (io, flops) = fused_q(&expr, &sizes, s);
        prop_assert!(io <= flops, "{expr} {sizes} S={s}: io path {io} > flops path {flops}");
    }
}
