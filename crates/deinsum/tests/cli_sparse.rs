//! `deinsum run` with a sparse operand: generated, from Matrix Market, FROSTT-shaped errors,
//! and the einsums not built yet refused with exit 2.

mod cli_support;
use cli_support::deinsum;

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn generated_spmm_matches_the_serial_product_and_the_plan() {
    for procs in ["1", "2", "5", "8"] {
        let (code, out, err) = deinsum(&[
            "run",
            "ij,jk->ik",
            "--sparse",
            "0",
            "--density",
            "0.02",
            "--sizes",
            "i=300,j=200,k=3",
            "--procs",
            procs,
            "--check",
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{out}{err}");
        let v = json(&out);
        assert_eq!(v["measured"]["exact"], true, "{out}");
        assert_eq!(v["measured"]["total"], v["predicted"]["total"], "{out}");
        assert!(
            v["check"]["max_rel_error"].as_f64().unwrap() <= 1e-12,
            "{out}"
        );
        assert!(v["predicted"]["total"].as_u64() <= v["replication"]["total"].as_u64());
    }
}

#[test]
fn rmat_spmv_moves_less_than_replicating_the_vector() {
    let (code, out, err) = deinsum(&[
        "run", "ij,j->i", "--rmat", "11", "--procs", "4", "--check", "--format", "json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["shape"], serde_json::json!([2048, 2048]));
    let (halo, repl) = (
        v["predicted"]["total"].as_u64().unwrap(),
        v["replication"]["total"].as_u64().unwrap(),
    );
    assert!(halo > 0 && halo < repl, "{halo} vs {repl}");
}

#[test]
fn matrix_market_input_gives_the_extents() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("A.mtx");
    std::fs::write(
        &a,
        "%%MatrixMarket matrix coordinate real symmetric\n4 4 4\n1 1 2\n3 1 -1\n4 2 0.5\n4 4 1\n",
    )
    .unwrap();
    let (code, out, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        a.to_str().unwrap(),
        "--procs",
        "3",
        "--check",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4 x 4 sparse (6 nonzeros"), "{out}");
    assert!(out.contains("B is 4 x 10"), "{out}");
    assert!(
        out.contains("exactly the planned words") && out.contains(": ok"),
        "{out}"
    );
    let (code, out, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        a.to_str().unwrap(),
        "--sizes",
        "k=3",
        "--procs",
        "2",
        "--check",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("B is 4 x 3"), "{out}");
    let bad = dir.join("bad.mtx");
    std::fs::write(
        &bad,
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 9 1\n",
    )
    .unwrap();
    let (code, _, err) = deinsum(&["run", "ij,j->i", "--inputs", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.mtx:3: column index: 9 is out of range 1..=2"),
        "{err}"
    );
}

#[test]
fn sparse_einsums_not_built_yet_exit_2_saying_so() {
    for args in [
        &["run", "ijk,ja,ka->ia", "--sparse", "0"][..],
        &["run", "ij,jk->ik", "--sparse", "1"][..],
        &["run", "ij,jk->ik", "--sparse", "0", "--dtype", "f32"][..],
        &["run", "ij,ik,jk->ij", "--sparse", "0"][..],
    ] {
        let (code, out, err) = deinsum(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("not built yet"), "{args:?}: {err}");
    }
    let (code, _, err) = deinsum(&["run", "ij,j->i", "--density", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("density 2 is not in (0, 1]"), "{err}");
}
