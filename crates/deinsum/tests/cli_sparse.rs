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
    let mut two_d = false;
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
        // Of the grids considered (the 1D cut listed first) whose imbalance is within the
        // slack of the least, none moves fewer words on its busiest rank; its parts multiply
        // to P.
        for (r, p) in v.iter().zip(PROCS) {
            let g = &r["grid"];
            let parts: u64 = g["parts_per_mode"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .product();
            assert_eq!(parts, *p as u64, "{r}");
            let considered = g["considered"].as_array().unwrap();
            assert_eq!(considered[0]["splits"], serde_json::json!([]), "{r}");
            let total = r["predicted"]["total"].as_u64().unwrap();
            let max = g["max_words"].as_u64().unwrap();
            let imb = |c: &serde_json::Value| c["imbalance"].as_f64().unwrap();
            let least = considered.iter().map(imb).fold(f64::INFINITY, f64::min);
            let slack = deinsum_sparse::dist::IMBALANCE_SLACK * (1.0 + 1e-12);
            let fewest = considered
                .iter()
                .filter(|c| imb(c) <= least * slack)
                .map(|c| c["max_words"].as_u64().unwrap())
                .min()
                .unwrap();
            assert!(max <= deinsum_sparse::dist::tie_band(fewest), "{r}");
            assert!(considered.iter().any(
                |c| c["words"].as_u64() == Some(total) && c["max_words"].as_u64() == Some(max)
            ));
        }
        two_d |= v
            .iter()
            .any(|r| r["grid"]["splits"] != serde_json::json!([]));
    }
    assert!(two_d, "no run chose a 2D grid");
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

/// Writes `vals` as a C-ordered .npy of `shape` (f64, or f32 when `f32`).
fn write_npy(path: &std::path::Path, shape: &[usize], vals: &[f64], f32: bool) {
    use deinsum::exec::npy::header_bytes;
    let mut bytes = if f32 {
        header_bytes::<f32>(shape)
    } else {
        header_bytes::<f64>(shape)
    };
    for &v in vals {
        if f32 {
            bytes.extend_from_slice(&(v as f32).to_le_bytes());
        } else {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// The f64 values of a C-ordered .npy file and its shape.
fn read_npy(path: &std::path::Path) -> (Vec<usize>, Vec<f64>) {
    let h = deinsum::exec::npy::read_header(path).unwrap();
    assert_eq!(h.descr, "<f8");
    let bytes = std::fs::read(path).unwrap();
    let vals = bytes[h.data_offset as usize..]
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (h.shape, vals)
}

#[test]
fn inputs_mix_a_sparse_file_with_dense_npy_operands() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-mix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A 6 x 6 matrix: non-symmetric, row 4 and column 5 empty, (2,1) given twice (summed),
    // an explicit zero at (3,3).
    let a = dir.join("A.mtx");
    std::fs::write(
        &a,
        "%%MatrixMarket matrix coordinate real general\n6 6 8\n1 1 2\n2 1 1\n3 2 -1\n2 1 0.5\n4 4 0\n6 1 3\n1 6 -2\n6 3 1.5\n",
    )
    .unwrap();
    let mut ad = [[0.0f64; 6]; 6];
    for (i, j, v) in [
        (0, 0, 2.0),
        (1, 0, 1.5),
        (2, 1, -1.0),
        (3, 3, 0.0),
        (5, 0, 3.0),
        (0, 5, -2.0),
        (5, 2, 1.5),
    ] {
        ad[i][j] = v;
    }
    // B (6 x 4): k's extent comes from its header (no --sizes).
    let k = 4;
    let bv: Vec<f64> = (0..6 * k).map(|x| (x as f64 * 0.37).sin()).collect();
    let b = dir.join("B.npy");
    write_npy(&b, &[6, k], &bv, false);
    let want: Vec<f64> = (0..6)
        .flat_map(|i| {
            let (ad, bv) = (&ad, &bv);
            (0..k).map(move |c| (0..6).map(|j| ad[i][j] * bv[j * k + c]).sum::<f64>())
        })
        .collect();
    let inputs = format!("{},{}", a.display(), b.display());
    for procs in ["1", "2", "3", "5", "8"] {
        let c = dir.join(format!("C{procs}.npy"));
        let (code, out, err) = deinsum(&[
            "run",
            "ij,jk->ik",
            "--inputs",
            &inputs,
            "--procs",
            procs,
            "--check",
            "--output",
            c.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("B is 6 x 4") && out.contains(": ok"), "{out}");
        let (shape, got) = read_npy(&c);
        assert_eq!(shape, vec![6, k]);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12, "P={procs}: {got:?} vs {want:?}");
        }
    }
    // SpMV with x from a float32 file (converted as numpy's astype), both schemes.
    let xv: Vec<f64> = (0..6).map(|j| j as f64 - 2.5).collect();
    let x = dir.join("x.npy");
    write_npy(&x, &[6], &xv, true);
    let want: Vec<f64> = (0..6)
        .map(|i| (0..6).map(|j| ad[i][j] * xv[j]).sum())
        .collect();
    for scheme in ["rows", "fine"] {
        let y = dir.join(format!("y-{scheme}.npy"));
        let (code, out, err) = deinsum(&[
            "run",
            "ij,j->i",
            "--inputs",
            &format!("{},{}", a.display(), x.display()),
            "--procs",
            "4",
            "--spmv-scheme",
            scheme,
            "--output",
            y.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(read_npy(&y), (vec![6], want.clone()), "{scheme}");
    }
    // A dense file whose shape disagrees with the sparse file's: exit 2 naming it and both
    // shapes.
    let bad = dir.join("bad.npy");
    write_npy(&bad, &[5, 3], &[0.0; 15], false);
    let (code, _, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        &format!("{},{}", a.display(), bad.display()),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.npy: expected shape (6, 3), found (5, 3)"),
        "{err}"
    );
    // A sparse result to .npy is densified (it fits): the SDDMM's values in A's pattern.
    let s = dir.join("s.npy");
    let (code, out, err) = deinsum(&[
        "run",
        "ij,ik,jk->ij",
        "--inputs",
        a.to_str().unwrap(),
        "--procs",
        "3",
        "--output",
        s.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (shape, got) = read_npy(&s);
    assert_eq!(shape, vec![6, 6]);
    for i in 0..6 {
        for j in 0..6 {
            if ad[i][j] == 0.0 && !(i == 3 && j == 3) {
                assert_eq!(got[i * 6 + j], 0.0, "({i},{j}) is outside the pattern");
            }
        }
    }
}

/// A 30 x 30 matrix file with empty rows (every fourth), a duplicate (summed) and an explicit
/// zero, its entries shifted by `salt`.
fn pattern_mtx(path: &std::path::Path, salt: usize) {
    let mut lines = Vec::new();
    for i in (0..30).filter(|i| i % 4 != 0) {
        for j in [(i * 7 + salt) % 30, (i * 11 + 2 * salt + 1) % 30] {
            lines.push(format!(
                "{} {} {}",
                i + 1,
                j + 1,
                (i + j) as f64 * 0.37 - 4.1
            ));
        }
    }
    lines.push("3 2 0.5".into());
    lines.push("3 2 0.25".into());
    lines.push("6 6 0".into());
    std::fs::write(
        path,
        format!(
            "%%MatrixMarket matrix coordinate real general\n30 30 {}\n{}\n",
            lines.len(),
            lines.join("\n")
        ),
    )
    .unwrap();
}

#[test]
fn sparse_results_written_in_every_format_read_back_as_the_serial_result() {
    use deinsum_sparse::{io, kernels, SparseTensor};
    let dir = std::env::temp_dir().join(format!("deinsum-cli-write-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("A.mtx"), dir.join("B.mtx"));
    pattern_mtx(&a, 3);
    pattern_mtx(&b, 5);
    let ta = io::read::<f64>(&a, None).unwrap();
    let tb = io::read::<f64>(&b, None).unwrap();
    let (ca, cb) = (ta.to_csr().unwrap(), tb.to_csr().unwrap());
    let k = 4;
    let uv: Vec<f64> = (0..30 * k).map(|x| (x as f64 * 0.53).cos()).collect();
    let vv: Vec<f64> = (0..30 * k).map(|x| (x as f64 * 0.29).sin()).collect();
    let (u, v) = (dir.join("U.npy"), dir.join("V.npy"));
    write_npy(&u, &[30, k], &uv, false);
    write_npy(&v, &[30, k], &vv, false);
    // The serial references: SDDMM in A's pattern (its explicit zero kept), and Gustavson's
    // SpGEMM.
    let sddmm = ta
        .with_values(kernels::sddmm(&ca, &uv, &vv, k).unwrap())
        .unwrap();
    let spgemm = kernels::spgemm(&ca, &cb).unwrap().to_tensor();
    let sddmm_in = format!("{},{},{}", a.display(), u.display(), v.display());
    let spgemm_in = format!("{},{}", a.display(), b.display());
    let close = |g: f64, w: f64| (g - w).abs() <= 1e-12 * (1.0 + w.abs());
    for (expr, inputs, want) in [
        ("ij,ik,jk->ij", &sddmm_in, &sddmm),
        ("ij,jk->ik", &spgemm_in, &spgemm),
    ] {
        for procs in ["1", "2", "3", "5", "8"] {
            for ext in ["mtx", "tns", "npz", "npy"] {
                let o = dir.join(format!("C-{}-{procs}.{ext}", expr.len()));
                let (code, out, err) = deinsum(&[
                    "run",
                    expr,
                    "--inputs",
                    inputs,
                    "--procs",
                    procs,
                    "--check",
                    "--output",
                    o.to_str().unwrap(),
                ]);
                assert_eq!(code, 0, "{expr} P={procs} .{ext}: {out}{err}");
                let what = format!("{expr} P={procs} .{ext}");
                if ext == "npy" {
                    let (shape, got) = read_npy(&o);
                    assert_eq!(shape, vec![30, 30], "{what}");
                    let w = want.to_dense();
                    assert!(got.iter().zip(&w).all(|(g, w)| close(*g, *w)), "{what}");
                    continue;
                }
                let got: SparseTensor<f64> = io::read(&o, Some(&[30, 30])).unwrap();
                assert_eq!(got.nnz(), want.nnz(), "{what}: the pattern");
                for e in 0..want.nnz() {
                    assert_eq!(got.coord(e), want.coord(e), "{what}: entry {e}");
                    assert!(
                        close(got.values()[e], want.values()[e]),
                        "{what}: entry {e}"
                    );
                }
            }
        }
    }
    // The explicit zero of A's pattern is stored in the SDDMM's file.
    let back: SparseTensor<f64> = io::read(&dir.join("C-12-3.mtx"), None).unwrap();
    assert!((0..back.nnz()).any(|e| back.coord(e) == [5, 5]));
    // Dense results to sparse files hold their nonzeros: SpMM to .mtx and .npz equals its
    // .npy, MTTKRP to .tns likewise.
    for (expr, extra, exts) in [
        (
            "ij,jk->ik",
            vec!["--inputs", a.to_str().unwrap(), "--sizes", "k=3"],
            vec!["mtx", "npz", "tns"],
        ),
        (
            "ijk,ja,ka->ia",
            vec![
                "--sparse",
                "0",
                "--density",
                "0.05",
                "--size",
                "12",
                "--sizes",
                "a=3",
            ],
            vec!["tns", "mtx"],
        ),
    ] {
        let npy = dir.join("D.npy");
        let mut args = vec![
            "run",
            expr,
            "--procs",
            "3",
            "--output",
            npy.to_str().unwrap(),
        ];
        args.extend(&extra);
        let (code, out, err) = deinsum(&args);
        assert_eq!(code, 0, "{out}{err}");
        let (shape, dense) = read_npy(&npy);
        for ext in exts {
            let o = dir.join(format!("D.{ext}"));
            let mut args = vec!["run", expr, "--procs", "3", "--output", o.to_str().unwrap()];
            args.extend(&extra);
            let (code, out, err) = deinsum(&args);
            assert_eq!(code, 0, "{out}{err}");
            let got: SparseTensor<f64> = io::read(&o, Some(&shape)).unwrap();
            assert_eq!(got.to_dense(), dense, "{expr} .{ext}");
            assert!(got.values().iter().all(|&x| x != 0.0), "{expr} .{ext}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn outputs_that_cannot_be_written_exit_2_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-badout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let busy = o("busy.mtx");
    std::fs::create_dir_all(&busy).unwrap();
    let huge = "i=4194304,j=4,k=4194304";
    for (args, want) in [
        // An extension that names no format.
        (
            vec![
                "ij,ik,jk->ij",
                "--sparse",
                "0",
                "--size",
                "20",
                "--output",
                &o("C.csv"),
            ],
            vec!["C.csv", "unknown output extension"],
        ),
        // A vector in a matrix format.
        (
            vec![
                "ij,j->i",
                "--sparse",
                "0",
                "--size",
                "20",
                "--output",
                &o("y.mtx"),
            ],
            vec!["y.mtx", "holds a matrix", "1 modes"],
        ),
        // A directory.
        (
            vec![
                "ij,jk->ik",
                "--sparse",
                "0,1",
                "--size",
                "20",
                "--output",
                &busy,
            ],
            vec!["busy.mtx", "is a directory"],
        ),
        // A sparse result whose dense array is 140 TB, to .npy.
        (
            vec![
                "ij,jk->ik",
                "--sparse",
                "0,1",
                "--density",
                "1e-6",
                "--sizes",
                huge,
                "--output",
                &o("C.npy"),
            ],
            vec![
                "C.npy",
                "SpGEMM result is sparse",
                "4194304 x 4194304",
                "140737488355328 bytes",
                ".mtx",
            ],
        ),
        // A run without a sparse operand writes .npy only.
        (
            vec!["ij,jk->ik", "--size", "4", "--output", &o("C.mtx")],
            vec!["C.mtx", "sparse operand"],
        ),
        (
            vec!["ij,jk->ik", "--size", "4", "--output", &o("C.txt")],
            vec!["C.txt", "unknown output extension"],
        ),
    ] {
        let mut a = vec!["run"];
        a.extend(&args);
        let (code, out, err) = deinsum(&a);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        for w in want {
            assert!(err.contains(w), "{args:?}: {w}: {err}");
        }
    }
    assert!(!dir.join("C.npy").exists() && !dir.join("C.csv").exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// `--dtype f32` runs every built form in single precision: checked against the dense serial
/// reference (1e-4 relative), every rank moving exactly the planned bytes, at P = 1, 2, 3.
#[test]
fn f32_runs_every_form_and_says_so() {
    let forms: [&[&str]; 5] = [
        &[
            "ij,j->i",
            "--sparse",
            "0",
            "--size",
            "40",
            "--density",
            "0.1",
        ],
        &[
            "ij,jk->ik",
            "--sparse",
            "0",
            "--size",
            "30",
            "--density",
            "0.1",
        ],
        &[
            "ij,ik,jk->ij",
            "--sparse",
            "0",
            "--size",
            "30",
            "--density",
            "0.1",
        ],
        &[
            "ij,jk->ik",
            "--sparse",
            "0,1",
            "--size",
            "30",
            "--density",
            "0.1",
        ],
        &[
            "ijk,ja,ka->ia",
            "--sparse",
            "0",
            "--size",
            "12",
            "--density",
            "0.05",
        ],
    ];
    for form in forms {
        for p in ["1", "2", "3"] {
            let mut args = vec!["run"];
            args.extend_from_slice(form);
            args.extend([
                "--procs", p, "--dtype", "f32", "--check", "--format", "json",
            ]);
            let (code, out, err) = deinsum(&args);
            assert_eq!(code, 0, "{args:?}: {out}{err}");
            let v = json(&out);
            assert_eq!(v["dtype"], "f32", "{args:?}");
            assert_eq!(v["measured"]["exact"], true, "{args:?}");
            assert!(
                v["check"]["max_rel_error"].as_f64().unwrap() <= 1e-4,
                "{args:?}: {v}"
            );
        }
    }
    let (code, out, err) = deinsum(&["run", "ij,j->i", "--sparse", "0", "--dtype", "f32"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("P = 1 (in-process, f32)"), "{out}");
}

/// `--repeat` and `--warmup` are honoured: the report's median is over the timed runs and
/// says how many untimed ones came first.
#[test]
fn repeat_and_warmup_are_honoured() {
    let base = ["run", "ij,jk->ik", "--sparse", "0", "--procs", "2"];
    let mut args = base.to_vec();
    args.extend(["--repeat", "3", "--warmup", "2"]);
    let (code, out, err) = deinsum(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("(slowest rank, median of 3, after 2 untimed)"),
        "{out}"
    );
    args.extend(["--format", "json", "--check"]);
    let (code, out, err) = deinsum(&args);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["warmup"], 2);
    assert_eq!(
        v["measured"]["exact"], true,
        "the first timed run is measured: {v}"
    );
    let mut zero = base.to_vec();
    zero.extend(["--repeat", "0"]);
    let (code, _, err) = deinsum(&zero);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--repeat must be at least 1"), "{err}");
}

/// Flags a sparse run cannot honour are refused with exit 2 and a message naming the flag,
/// never ignored.
#[test]
fn flags_a_sparse_run_cannot_honour_are_refused() {
    let dir = std::env::temp_dir().join(format!("deinsum-sparse-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("run.html");
    let machine = dir.join("m.json");
    std::fs::write(&machine, "{}").unwrap();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--html", html.to_str().unwrap()],
            "--html does not apply to a sparse run",
        ),
        (
            &["--machine", machine.to_str().unwrap()],
            "--machine does not apply to a sparse run",
        ),
        (
            &["--objective", "volume"],
            "--objective does not apply to a sparse run",
        ),
        (
            &["--no-overlap"],
            "--no-overlap does not apply to a sparse run",
        ),
        (
            &["--mem", "1000"],
            "--plan or --mem with a sparse operand is not built yet",
        ),
        (&["--threads", "0"], "--threads must be at least 1"),
    ];
    for (flag, says) in cases {
        let mut args = vec!["run", "ij,jk->ik", "--sparse", "0"];
        args.extend_from_slice(flag);
        let (code, out, err) = deinsum(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} ran: {out}");
    }
    assert!(!html.exists(), "a refused --html wrote its page");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A complex Matrix Market file (`complex general`, 13 x 11, entries on a few rows only).
fn complex_mtx(path: &std::path::Path) {
    let mut text = String::from("%%MatrixMarket matrix coordinate complex general\n");
    let entries: Vec<(usize, usize)> = (0..13)
        .filter(|i| i % 4 != 1)
        .flat_map(|i| [(i, (3 * i) % 11), (i, (5 * i + 2) % 11)])
        .collect();
    text.push_str(&format!("13 11 {}\n", entries.len()));
    for (e, (i, j)) in entries.iter().enumerate() {
        let (re, im) = (0.25 * e as f64 - 2.0, 1.5 - 0.125 * (e % 7) as f64);
        text.push_str(&format!("{} {} {re} {im}\n", i + 1, j + 1));
    }
    std::fs::write(path, text).unwrap();
}

/// Complex sparse runs: a Matrix Market `complex` file times a seeded dense operand (SpMM)
/// and times SciPy's complex128 CSR archive (SpGEMM) in c128 and c64 at P = 1..16 (primes,
/// extents no P divides), checked against the serial reference with the dtype's tolerance,
/// words exact; the results written as complex Matrix Market, complex128 `.npz` and `.npy`;
/// without `--dtype` the complex file is refused naming `--dtype c128`, and a complex result
/// to `.tns` is refused before the run, exit 2.
#[test]
fn complex_sparse_files_run_in_c128_and_c64() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-csparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("A.mtx");
    complex_mtx(&a);
    let a = a.to_str().unwrap();
    let npz = format!(
        "{}/../sparse/tests/data/csr_c128.npz",
        env!("CARGO_MANIFEST_DIR")
    );
    // A 13 x 4 complex sparse matrix for the 4 x 5 archive: the first columns of A's pattern.
    let b = dir.join("B.mtx");
    let text = std::fs::read_to_string(dir.join("A.mtx")).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .skip(2)
        .filter(|l| l.split(' ').nth(1).unwrap().parse::<usize>().unwrap() <= 4)
        .collect();
    let head = format!(
        "%%MatrixMarket matrix coordinate complex general\n13 4 {}\n",
        kept.len()
    );
    std::fs::write(&b, head + &kept.join("\n") + "\n").unwrap();
    let b = b.to_str().unwrap();
    for (dtype, tol) in [("c128", 1e-10), ("c64", 1e-4)] {
        for p in ["1", "2", "3", "5", "7", "11", "13", "16"] {
            let inputs = format!("{b},{npz}");
            for args in [
                vec!["run", "ij,jk->ik", "--inputs", a, "--sizes", "k=3"],
                vec!["run", "ij,jk->ik", "--inputs", inputs.as_str()],
            ] {
                let mut args = args.clone();
                args.extend([
                    "--dtype", dtype, "--procs", p, "--check", "--format", "json",
                ]);
                let (code, out, err) = deinsum(&args);
                assert_eq!(code, 0, "{args:?}: {out}{err}");
                let v = json(&out);
                assert_eq!(v["dtype"], dtype, "{args:?}");
                assert_eq!(v["measured"]["exact"], true, "{args:?}: {out}");
                let rel = v["check"]["max_rel_error"].as_f64().unwrap();
                assert!(rel <= tol, "{args:?}: {out}");
            }
        }
    }
    // Outputs: complex Matrix Market, complex128 archive and array; SpGEMM's and SpMM's.
    for (inputs, sizes) in [(format!("{b},{npz}"), None), (a.to_string(), Some("k=3"))] {
        for ext in ["mtx", "npz", "npy"] {
            let out_file = dir.join(format!("C.{ext}"));
            let mut args = vec![
                "run",
                "ij,jk->ik",
                "--inputs",
                inputs.as_str(),
                "--dtype",
                "c128",
            ];
            if let Some(s) = sizes {
                args.extend(["--sizes", s]);
            }
            args.extend(["--procs", "3", "--output", out_file.to_str().unwrap()]);
            let (code, out, err) = deinsum(&args);
            assert_eq!(code, 0, "{args:?}: {out}{err}");
            let bytes = std::fs::read(&out_file).unwrap();
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).to_string();
            match ext {
                "mtx" => assert!(
                    text.starts_with("%%MatrixMarket matrix coordinate complex general"),
                    "{text}"
                ),
                "npy" => assert!(text.contains("'descr': '<c16'"), "{text}"),
                _ => {}
            }
        }
        // The archive reads back as a complex sparse operand of the next product.
        let c_npz = dir.join("C.npz");
        let (code, out, err) = deinsum(&[
            "run",
            "ij,jk->ik",
            "--inputs",
            c_npz.to_str().unwrap(),
            "--sizes",
            "k=2",
            "--dtype",
            "c128",
            "--procs",
            "2",
            "--check",
        ]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("c128"), "{out}");
    }
    // Without --dtype, the complex file is refused naming the complex dtype.
    let (code, out, err) = deinsum(&["run", "ij,jk->ik", "--inputs", a, "--sizes", "k=3"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("use --dtype c128"), "{err}");
    // A complex result to FROSTT: refused before the run.
    let tns = dir.join("C.tns");
    let (code, out, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        a,
        "--sizes",
        "k=3",
        "--dtype",
        "c64",
        "--output",
        tns.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("FROSTT") && err.contains("complex"), "{err}");
    assert!(!tns.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
