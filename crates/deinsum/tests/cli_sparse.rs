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
        &["run", "ijk,jk->i", "--sparse", "0"][..],
        &["run", "ij,jk->ik", "--sparse", "1"][..],
        &["run", "ij,jk->ik", "--sparse", "0", "--dtype", "f32"][..],
        &["run", "ij,ik,jk->ji", "--sparse", "0"][..],
        &["run", "ijk,ja,ka->ia", "--sparse", "0,1"][..],
    ] {
        let (code, out, err) = deinsum(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("not built yet"), "{args:?}: {err}");
    }
    let (code, _, err) = deinsum(&["run", "ij,j->i", "--density", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("density 2 is not in (0, 1]"), "{err}");
    let (code, _, err) = deinsum(&["run", "ij,j->i", "--sparse", "2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--sparse 2: the einsum has 2 operands"),
        "{err}"
    );
}

/// Runs `args` with `--check --format json` on each of `procs` and asserts the distributed
/// result equals the reference and every rank moved exactly the planned words.
fn check_runs(args: &[&str], procs: &[usize]) -> Vec<serde_json::Value> {
    procs
        .iter()
        .map(|p| {
            let p = p.to_string();
            let mut a: Vec<&str> = args.to_vec();
            a.extend(["--procs", &p, "--check", "--format", "json"]);
            let (code, out, err) = deinsum(&a);
            assert_eq!(code, 0, "{a:?}: {out}{err}");
            let v = json(&out);
            assert_eq!(v["measured"]["exact"], true, "{a:?}: {out}");
            assert_eq!(v["measured"]["total"], v["predicted"]["total"], "{out}");
            assert!(
                v["check"]["max_rel_error"].as_f64().unwrap() <= 1e-12,
                "{a:?}: {out}"
            );
            assert!(
                v["check"]["reference"]
                    .as_str()
                    .unwrap()
                    .contains("dense serial"),
                "{out}"
            );
            assert!(
                v["predicted"]["total"].as_u64() <= v["replication"]["total"].as_u64(),
                "{out}"
            );
            v
        })
        .collect()
}

const PROCS: &[usize] = &[1, 2, 3, 5, 7, 13, 16];

#[test]
fn sddmm_spgemm_and_mttkrp_equal_the_dense_reference_with_exact_words() {
    let v = check_runs(
        &[
            "run",
            "ij,ik,jk->ij",
            "--sparse",
            "0",
            "--density",
            "0.08",
            "--sizes",
            "i=37,j=29,k=5",
        ],
        PROCS,
    );
    assert_eq!(v[0]["kernel"], "SDDMM");
    assert_eq!(v[0]["output_nnz"], v[0]["nnz"]);
    let v = check_runs(
        &[
            "run",
            "ij,jk->ik",
            "--sparse",
            "0,1",
            "--density",
            "0.1",
            "--sizes",
            "i=31,j=23,k=19",
        ],
        PROCS,
    );
    assert_eq!(v[0]["kernel"], "SpGEMM");
    assert_eq!(v[0]["sparse_operands"], serde_json::json!([0, 1]));
    for (expr, sizes) in [
        ("ijk,ja,ka->ia", "i=11,j=9,k=7,a=4"),
        ("ijk,ia,ka->ja", "i=11,j=9,k=7,a=4"),
        ("ijk,ia,ja->ka", "i=11,j=9,k=7,a=4"),
        ("ijkl,ja,ka,la->ia", "i=11,j=9,k=7,l=3,a=4"),
    ] {
        let v = check_runs(&["run", expr, "--density", "0.05", "--sizes", sizes], PROCS);
        assert_eq!(v[0]["kernel"], "MTTKRP");
        // Costs from the nonzeros: terms = nnz x R, flops = terms x operands.
        let nnz = v[0]["nnz"].as_u64().unwrap();
        let ops = expr.split(',').count() as u64;
        assert_eq!(v[0]["cost"]["flops_total"].as_u64().unwrap(), nnz * 4 * ops);
    }
}

#[test]
fn sparse_files_for_spgemm_and_mttkrp() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-sparse2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Symmetric with an explicit zero; general with a duplicate (summed) and an empty row.
    let a = dir.join("A.mtx");
    std::fs::write(
        &a,
        "%%MatrixMarket matrix coordinate real symmetric\n5 5 5\n1 1 2\n3 1 -1\n4 2 0\n5 5 1\n5 3 2\n",
    )
    .unwrap();
    let b = dir.join("B.mtx");
    std::fs::write(
        &b,
        "%%MatrixMarket matrix coordinate real general\n5 4 5\n1 1 2\n3 4 -1\n1 1 0.5\n5 2 3\n4 3 1\n",
    )
    .unwrap();
    let inputs = format!("{},{}", a.display(), b.display());
    let v = check_runs(&["run", "ij,jk->ik", "--inputs", &inputs], &[1, 2, 3, 4, 7]);
    assert_eq!(v[0]["operands"][1]["nnz"], 4);
    assert_eq!(v[0]["operands"][0]["nnz"], 8);
    check_runs(
        &[
            "run",
            "ij,ik,jk->ij",
            "--inputs",
            a.to_str().unwrap(),
            "--sizes",
            "k=3",
        ],
        &[1, 3, 6],
    );
    let x = dir.join("X.tns");
    std::fs::write(&x, "1 1 1 1.5\n2 3 4 -2\n1 1 1 0.5\n3 2 2 0\n2 1 4 1\n").unwrap();
    let v = check_runs(
        &[
            "run",
            "ijk,ia,ja->ka",
            "--inputs",
            x.to_str().unwrap(),
            "--sizes",
            "a=3",
        ],
        &[1, 2, 5],
    );
    assert_eq!(v[0]["shape"], serde_json::json!([3, 3, 4]));
    assert_eq!(v[0]["nnz"], 4);
}

#[test]
fn spmv_schemes_equal_the_dense_reference_and_auto_takes_the_fewer_words() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-fine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Non-symmetric, rows and columns 5 and 8 empty, a duplicate (summed), an explicit zero.
    let a = dir.join("ns.mtx");
    std::fs::write(
        &a,
        "%%MatrixMarket matrix coordinate real general\n9 9 12\n1 2 1\n2 1 -2\n1 9 3\n9 1 0.5\n3 3 1\n4 7 2\n7 4 0\n1 2 1\n6 1 4\n1 6 -1\n2 9 1.5\n9 2 2\n",
    )
    .unwrap();
    let mtx = a.to_str().unwrap();
    for scheme in ["rows", "fine", "auto"] {
        for args in [
            &["run", "ij,j->i", "--rmat", "8", "--spmv-scheme", scheme][..],
            &[
                "run",
                "ij,jk->ik",
                "--rmat",
                "7",
                "--sizes",
                "i=128,j=128,k=3",
                "--spmv-scheme",
                scheme,
            ][..],
            &["run", "ij,j->i", "--inputs", mtx, "--spmv-scheme", scheme][..],
        ] {
            for v in check_runs(args, PROCS) {
                let s = &v["scheme"];
                let (rows, fine) = (
                    s["rows"]["total"].as_u64().unwrap(),
                    s["fine"]["total"].as_u64().unwrap(),
                );
                let in_use = s["in_use"].as_str().unwrap();
                let want = match scheme {
                    "auto" if fine < rows => "fine",
                    "auto" => "rows",
                    other => other,
                };
                assert_eq!(in_use, want, "{args:?}: {v}");
                let planned = if in_use == "fine" { fine } else { rows };
                assert_eq!(v["predicted"]["total"].as_u64(), Some(planned), "{v}");
            }
        }
    }
    // On R-MAT the fine-grain scheme is the one auto takes.
    let v = &check_runs(&["run", "ij,j->i", "--rmat", "10"], &[4])[0];
    assert_eq!(v["scheme"]["in_use"], "fine", "{v}");
    // Not a square SpMV/SpMM: the flag is refused.
    let (code, _, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--sparse",
        "0",
        "--sizes",
        "i=5,j=7,k=2",
        "--spmv-scheme",
        "fine",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--spmv-scheme applies to"), "{err}");
}
