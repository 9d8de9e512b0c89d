//! End-to-end tests of `deinsum path`.

use std::process::Command;

fn deinsum(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deinsum"))
        .args(args)
        .output()
        .expect("run deinsum");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
        &[
            "path",
            "ab,bc,cd->ad",
            "--size",
            "10",
            "--memory-limit",
            "10",
        ][..],
        &["path", "ab,b?->a"][..],
    ] {
        let (code, out, err) = deinsum(args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}
