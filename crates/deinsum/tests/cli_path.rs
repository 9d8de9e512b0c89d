//! End-to-end tests of `deinsum path`.

mod cli_support;
use cli_support::deinsum;

#[test]
fn path_json_replays_in_opt_einsum_format() {
    let (code, out, err) = deinsum(&[
        "path",
        "ab,bc,cd->ad",
        "--sizes",
        "a=10,b=100,c=5,d=50",
        "--optimize",
        "optimal",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["path"], serde_json::json!([[0, 1], [1, 0]]));
    assert_eq!(v["flops"], 15000);
    assert_eq!(v["naive_flops"], 750000);
    assert_eq!(v["largest_intermediate"], 500);
    assert_eq!(v["steps"][0]["einsum"], "ab,bc->ac");
    assert_eq!(v["steps"][1]["einsum"], "ac,cd->ad");
}

#[test]
fn path_text_has_the_table() {
    let (code, out, _) = deinsum(&["path", "ijk,ja,ka,al->il", "--size", "10"]);
    assert_eq!(code, 0);
    assert!(out.contains("Optimized FLOP count:  23000"), "{out}");
    assert!(out.contains("ja,ka->jka"), "{out}");
}

#[test]
fn path_input_errors_exit_2() {
    for args in [
        &["path", "ab,bc->ac", "--optimize", "fastest"][..],
        &["path", "ab,bc->ac", "--memory-limit", "lots"][..],
        &["path", "ab,b?->a"][..],
    ] {
        let (code, out, err) = deinsum(args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

#[test]
fn memory_limit_below_every_step_gives_opt_einsums_single_step() {
    // opt_einsum.contract_path(..., memory_limit=5000) returns [(0, 1, 2, 3)] and 4294967296.
    let args = [
        "path",
        "ijk,ja,ka,al->il",
        "--size",
        "64",
        "--memory-limit",
        "5000",
    ];
    let (code, out, err) = deinsum(&[&args[..], &["--format", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["path"], serde_json::json!([[0, 1, 2, 3]]));
    assert_eq!(v["flops"], 4294967296u64);
    assert_eq!(v["largest_intermediate"], 4096);
    let (code, out, err) = deinsum(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(0, 1, 2, 3)  ijk,ja,ka,al->il"), "{out}");
    assert!(out.contains("one step over all operands"), "{out}");
}

#[test]
fn single_operand_reductions_print_as_python_tuples() {
    // opt_einsum's dp: [(0,), (0, 2), (0, 1)] at 552000 FLOPs.
    let (code, out, err) = deinsum(&[
        "path",
        "aib,bc,cd->ad",
        "--sizes",
        "a=30,i=40,b=50,c=60,d=70",
        "--optimize",
        "dp",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Optimized FLOP count:  552000"), "{out}");
    assert!(out.contains("(0,)        aib->ab"), "{out}");
}

#[test]
fn opt_einsum_symbols_are_indices() {
    // get_symbol(75) and get_symbol(107).
    let (code, out, err) = deinsum(&["path", "a×,×÷,÷b->ab", "--sizes", "×=3,÷=4", "--size", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("a×,×÷,÷b->ab"), "{out}");
}
