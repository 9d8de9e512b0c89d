//! `deinsum run` end to end (in-process backend).

use std::process::Command;

mod cli_support;
use cli_support::deinsum;

#[test]
fn readme_command_checks_and_matches_the_plan() {
    let (code, out, err) = deinsum(&[
        "run",
        "ijk,ja,ka,al->il",
        "--size",
        "12",
        "--procs",
        "8",
        "--check",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("every rank exactly as planned"), "{out}");
    assert!(
        out.contains("check (naive loop nest)") && out.contains(": ok"),
        "{out}"
    );
    assert!(out.contains("redistribute"), "{out}");
}

#[test]
fn json_and_f32() {
    let (code, out, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--sizes",
        "i=9,j=7,k=5",
        "--procs",
        "5",
        "--check",
        "--format",
        "json",
        "--dtype",
        "f32",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["volume_exact"], true);
    assert_eq!(v["check"]["pass"], true);
    assert_eq!(v["dtype"], "f32");
    assert!(v["check"]["max_rel_error"].as_f64().unwrap() < 1e-4);
    assert_eq!(v["procs"], 5);
}

/// `--dtype` takes the names of `DType`, lists them in the help as it always has, and refuses
/// any other with clap's usual message (exit 2).
#[test]
fn dtype_names_are_listed_and_checked() {
    let (code, out, err) = deinsum(&["run", "--help"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("--dtype <DTYPE>"), "{out}");
    assert!(out.contains("- f64:  Double precision"), "{out}");
    assert!(out.contains("- f32:  Single precision"), "{out}");
    assert!(out.contains("[default: f64]"), "{out}");
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", "--dtype", "f16"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid value 'f16'"), "{err}");
    assert!(
        err.contains("[possible values: f64, f32, c128, c64]"),
        "{err}"
    );
    assert!(
        out.contains("- c128: Complex, double-precision parts"),
        "{out}"
    );
}

#[test]
fn bad_input_exits_2() {
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", "--procs", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = deinsum(&["run", "ij,jk->iq", "--size", "4"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", "--inputs", "a.npy"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("2 operands"), "{err}");
}

#[test]
fn repeated_runs_report_min_and_median_per_step_and_in_total() {
    let (code, out, err) = deinsum(&[
        "run",
        "ij,jk,kl->il",
        "--size",
        "12",
        "--procs",
        "3",
        "--repeat",
        "4",
        "--warmup",
        "1",
        "--threads",
        "2",
        "--check",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["check"]["pass"], true);
    assert_eq!(v["volume_exact"], true);
    assert_eq!(
        (v["repeat"].as_u64(), v["threads"].as_u64()),
        (Some(4), Some(2))
    );
    let runs = v["contraction_seconds"].as_array().expect("per-run times");
    assert_eq!(runs.len(), 4);
    let min = v["contraction_seconds_min"].as_f64().unwrap();
    let med = v["contraction_seconds_median"].as_f64().unwrap();
    assert!(min > 0.0 && min <= med, "min {min} median {med}");
    for s in v["steps"].as_array().unwrap() {
        assert!(s["seconds_min"].as_f64().unwrap() <= s["seconds_median"].as_f64().unwrap());
    }
    for bad in [["--repeat", "0"], ["--threads", "0"]] {
        let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", bad[0], bad[1]]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(bad[0]), "{err}");
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn mpi_backend_without_feature_is_a_clear_error() {
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", "--backend", "mpi"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("mpi` feature"), "{err}");
}

#[test]
fn output_npy_holds_the_result_and_reads_back_as_input() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("c.npy");
    let o = out.to_str().unwrap();
    let (code, s, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--sizes",
        "i=6,j=4,k=5",
        "--procs",
        "3",
        "--seed",
        "5",
        "--output",
        o,
    ]);
    assert_eq!(code, 0, "{s}{err}");
    // The file holds the seeded product.
    let e = deinsum::expr::parse(
        "ij,jk->ik",
        &deinsum::expr::ExtentSpec {
            sizes: [('i', 6), ('j', 4), ('k', 5)].into_iter().collect(),
            ..Default::default()
        },
    )
    .unwrap();
    let want = deinsum::exec::reference::naive_seeded(&e, 5);
    let c = deinsum::expr::Operand::new(vec![
        deinsum::expr::Dim::Index('i'),
        deinsum::expr::Dim::Index('k'),
    ]);
    let got: Vec<f64> = deinsum::exec::npy::read_operand_block(
        &out,
        &c,
        &[('i', 6), ('k', 5)].into_iter().collect(),
        &deinsum::plan::Block::full(&[6, 5]),
    )
    .unwrap();
    let (_, rel) = deinsum::exec::reference::max_error(&got, &want);
    assert!(rel < 1e-14, "{rel}");
    // Read back as the input of a transpose, distributed over 4 ranks, and checked serially.
    let (code, s, err) = deinsum(&[
        "run", "ik->ki", "--sizes", "i=6,k=5", "--procs", "4", "--inputs", o, "--check",
    ]);
    assert_eq!(code, 0, "{s}{err}");
    assert!(s.contains(": ok"), "{s}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_run_that_cannot_fit_this_node_is_refused_before_allocating() {
    // 3 x 10^10 words of f64: more than any test machine has, refused from the plan's figures.
    let (code, out, err) = deinsum(&["run", "ij,jk->ik", "--size", "100000", "--procs", "2"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("needs") && err.contains("available"), "{err}");
    assert!(err.contains("nodes like this one"), "{err}");
    assert!(!err.contains("memory allocation"), "{err}");
}

#[test]
fn impossible_rank_counts_are_input_errors() {
    for procs in ["18446744073709551615", "65537"] {
        let (code, out, err) = deinsum(&["run", "ij,jk->ik", "--size", "8", "--procs", procs]);
        assert_eq!(code, 2, "{procs}: {out}{err}");
        assert!(err.contains("in-process ranks requested"), "{err}");
    }
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "8", "--procs", "-3"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn named_extent_one_dims_broadcast_as_numpy() {
    // NumPy: einsum("bhqd,bhkd->bhqk", (2,1,5,4), (2,3,7,4)) has shape (2, 3, 5, 7).
    let dir = std::env::temp_dir().join(format!("deinsum-cli-bcast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("s.npy");
    for procs in ["1", "3", "5"] {
        let (code, s, err) = deinsum(&[
            "run",
            "bhqd,bhkd->bhqk",
            "--shapes",
            "2x1x5x4,2x3x7x4",
            "--procs",
            procs,
            "--check",
            "--format",
            "json",
            "--output",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{s}{err}");
        let v: serde_json::Value = serde_json::from_str(&s).expect("json");
        assert_eq!(v["check"]["pass"], true, "{s}");
        assert_eq!(v["volume_exact"], true, "{s}");
        let bytes = std::fs::read(&out).unwrap();
        let header = String::from_utf8_lossy(&bytes[..bytes.len().min(128)]).into_owned();
        assert!(header.contains("'shape': (2, 3, 5, 7)"), "{header}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Writes a `.npy` file of dtype `descr` and order with raw data bytes `data`.
fn write_npy_raw(path: &std::path::Path, descr: &str, fortran: bool, shape: &[usize], data: &[u8]) {
    let dims: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let fo = if fortran { "True" } else { "False" };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': {fo}, 'shape': {shape_text}, }}");
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn inputs_as_a_user_has_them_extents_from_headers_and_dtypes_converted() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (m, k, n) = (11usize, 7usize, 13usize);
    let a: Vec<i64> = (0..m * k).map(|x| (x as i64 * 37) % 19 - 9).collect();
    let b: Vec<f64> = (0..k * n).map(|x| (x as f64 * 0.37).sin()).collect();
    let pa = dir.join("A.npy");
    let pb = dir.join("B.npy");
    write_npy_raw(
        &pa,
        "<i8",
        false,
        &[m, k],
        &a.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
    );
    // B big-endian and Fortran-ordered: column j of B is contiguous.
    let bf: Vec<u8> = (0..n)
        .flat_map(|col| (0..k).map(move |row| row * n + col))
        .flat_map(|ix| b[ix].to_be_bytes())
        .collect();
    write_npy_raw(&pb, ">f8", true, &[k, n], &bf);
    let out = dir.join("C.npy");
    let list = format!(" {} , {} ", pa.display(), pb.display());
    let (code, s, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        &list,
        "--procs",
        "3",
        "--check",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{s}{err}");
    assert!(s.contains("i=11,j=7,k=13"), "{s}");
    assert!(s.contains(": ok"), "{s}");
    assert!(
        err.contains("A.npy holds int64; converted to float64"),
        "{err}"
    );
    assert!(err.contains("B.npy holds big-endian float64"), "{err}");
    // The output equals the product computed here, serially.
    let got: Vec<f64> = deinsum::exec::npy::read_operand_block(
        &out,
        &deinsum::expr::Operand::new(vec![
            deinsum::expr::Dim::Index('i'),
            deinsum::expr::Dim::Index('k'),
        ]),
        &[('i', m), ('k', n)].into_iter().collect(),
        &deinsum::plan::Block::full(&[m, n]),
    )
    .unwrap();
    let want: Vec<f64> = (0..m * n)
        .map(|ix| {
            (0..k)
                .map(|j| a[ix / n * k + j] as f64 * b[j * n + ix % n])
                .sum()
        })
        .collect();
    let (_, rel) = deinsum::exec::reference::max_error(&got, &want);
    assert!(rel < 1e-13, "{rel}");

    // An index the files disagree on names both files and the index.
    let pbad = dir.join("Bbad.npy");
    write_npy_raw(&pbad, "<f8", false, &[6, n], &vec![0u8; 6 * n * 8]);
    let list = format!("{},{}", pa.display(), pbad.display());
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--inputs", &list]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("index 'j'") && err.contains("A.npy") && err.contains("Bbad.npy"),
        "{err}"
    );
    // A trailing comma names the empty item.
    let list = format!("{},{},", pa.display(), pb.display());
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--inputs", &list]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("item 3 of 3 is empty"), "{err}");
    // A directory says so; a missing file exits 2 and says it once.
    let list = format!("{},{}", pa.display(), dir.display());
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--inputs", &list]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is a directory"), "{err}");
    let list = format!("{},{}", pa.display(), dir.join("none.npy").display());
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--inputs", &list]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    // A wrong shape with extents from the flags exits 2 as well.
    let list = format!("{},{}", pa.display(), pb.display());
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", "--inputs", &list]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected shape (4, 4)"), "{err}");
    // The output may not overwrite an input.
    let (code, _, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        &list,
        "--output",
        pa.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is also an input"), "{err}");
    // An output that cannot be created is refused before the run, exit 2.
    for (o, want) in [
        (dir.to_str().unwrap().to_string(), "is a directory"),
        (
            dir.join("no/C.npy").to_str().unwrap().to_string(),
            "does not exist",
        ),
    ] {
        let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--inputs", &list, "--output", &o]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn deinsum_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deinsum"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(not(feature = "mpi"))]
#[test]
fn an_mpi_launch_without_the_mpi_build_is_refused_not_run_n_times() {
    let run = ["run", "ij,jk->ik", "--size", "4"];
    let (code, out, err) = deinsum_env(&run, &[("OMPI_COMM_WORLD_SIZE", "3")]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("one of 3 ranks") && err.contains("mpi` feature"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    let (code, _, err) = deinsum_env(&run, &[("PMI_SIZE", "2")]);
    assert_eq!(code, 2, "{err}");
    // A launch of one rank runs in process; an explicit --backend local is obeyed.
    let (code, out, err) = deinsum_env(&run, &[("OMPI_COMM_WORLD_SIZE", "1")]);
    assert_eq!(code, 0, "{out}{err}");
    let local = ["run", "ij,jk->ik", "--size", "4", "--backend", "local"];
    let (code, out, err) = deinsum_env(&local, &[("OMPI_COMM_WORLD_SIZE", "3")]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn an_input_error_is_printed_by_launched_rank_0_only() {
    let bad = ["run", "ij,jk->ik", "--size", "4", "--inputs", "a.npy"];
    let (code, _, err) = deinsum_env(&bad, &[("OMPI_COMM_WORLD_RANK", "1")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.is_empty(), "{err}");
    let (code, _, err) = deinsum_env(&bad, &[("OMPI_COMM_WORLD_RANK", "0")]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.matches("2 operands").count(), 1, "{err}");
}

#[test]
fn a_saved_plan_runs_exactly_and_bad_plan_files_are_refused_before_running() {
    let dir = std::env::temp_dir().join(format!("deinsum-cli-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let p = plan.to_str().unwrap();
    let sizes = "i=7,j=6,k=8,a=5,l=9";
    let (code, _, err) = deinsum(&[
        "plan",
        "ijk,ja,ka,al->il",
        "--sizes",
        sizes,
        "--procs",
        "5",
        "-o",
        p,
    ]);
    assert_eq!(code, 0, "{err}");
    // The saved plan runs on its 5 ranks, checked, with the plan's predicted words.
    let (code, out, err) = deinsum(&["run", "--plan", p, "--check", "--format", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(v["procs"], 5);
    assert_eq!(v["check"]["pass"], true);
    assert_eq!(v["volume_exact"], true);
    assert_eq!(v["predicted_total"], saved["prediction"]["total"]);
    // With input files: the output of a generated run, read back as an input of the plan.
    let (code, _, err) = deinsum(&[
        "plan",
        "ij,jk->ik",
        "--sizes",
        "i=6,j=4,k=5",
        "--procs",
        "3",
        "-o",
        p,
    ]);
    assert_eq!(code, 0, "{err}");
    let a = dir.join("a.npy");
    let b = dir.join("b.npy");
    for (f, s) in [(&a, "i=6,k=4"), (&b, "i=4,k=5")] {
        let (code, _, err) = deinsum(&[
            "run",
            "ik->ik",
            "--sizes",
            s,
            "--output",
            f.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let list = format!("{},{}", a.display(), b.display());
    let (code, out, err) = deinsum(&["run", "--plan", p, "--inputs", &list, "--check"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("on 3 ranks") && out.contains(": ok"), "{out}");

    // Another number of ranks, another schema version, garbage, an inconsistent plan: exit 2,
    // naming the file, and nothing runs (no report on stdout).
    let (code, out, err) = deinsum(&["run", "--plan", p, "--procs", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("for 3 ranks") && err.contains("has 4"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    let text = std::fs::read_to_string(&plan).unwrap();
    let bad = dir.join("bad.json");
    let cases = [
        (
            text.replacen("\"version\": 3", "\"version\": 2", 1),
            "schema version 2",
        ),
        ("not json".to_string(), "does not parse"),
        (
            text.replacen("\"procs\": 3", "\"procs\": 2", 1),
            "not a valid plan",
        ),
        (
            text.replacen(
                "\"expression\": \"ij,jk->ik\"",
                "\"expression\": \"ij,jk->ki\"",
                1,
            ),
            "does not match",
        ),
    ];
    for (content, want) in cases {
        assert_ne!(content, text, "the edit for {want:?} applies");
        std::fs::write(&bad, content).unwrap();
        let (code, out, err) = deinsum(&["run", "--plan", bad.to_str().unwrap()]);
        assert_eq!(code, 2, "{want}: {err}");
        assert!(
            err.contains("bad.json") && err.contains(want),
            "{want}: {err}"
        );
        assert!(out.is_empty(), "{out}");
    }
    let (code, _, err) = deinsum(&["run", "--plan", dir.join("none.json").to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Complex runs: seeded c128 and c64 inputs checked against the serial complex reference
/// (JSON names the dtype); a complex128 `.npy` file (big-endian, Fortran order) times a real
/// one in a c128 run writes a `<c16` output equal to the product computed here; a complex file
/// in a real run is refused (exit 2) as NumPy's safe casting refuses it.
#[test]
fn complex_runs_seeded_and_from_files() {
    for (dtype, tol) in [("c128", 1e-10), ("c64", 1e-4)] {
        let (code, out, err) = deinsum(&[
            "run",
            "ij,jk,kl->il",
            "--sizes",
            "i=9,j=7,k=5,l=6",
            "--procs",
            "7",
            "--check",
            "--format",
            "json",
            "--dtype",
            dtype,
        ]);
        assert_eq!(code, 0, "{out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["dtype"], dtype);
        assert_eq!(v["check"]["pass"], true);
        assert!(v["check"]["max_rel_error"].as_f64().unwrap() < tol);
        assert_eq!(v["volume_exact"], true);
    }
    use deinsum::exec::scalar::Complex64;
    let dir = std::env::temp_dir().join(format!("deinsum-cli-complex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (m, k, n) = (5usize, 7usize, 4usize);
    let a: Vec<Complex64> = (0..m * k)
        .map(|x| Complex64::new((x as f64 * 0.3).sin(), (x as f64 * 0.7).cos()))
        .collect();
    let b: Vec<f64> = (0..k * n).map(|x| (x as f64 * 0.37).sin()).collect();
    let (pa, pb) = (dir.join("Z.npy"), dir.join("B.npy"));
    let af: Vec<u8> = (0..k)
        .flat_map(|col| (0..m).map(move |row| row * k + col))
        .flat_map(|ix| [a[ix].re.to_be_bytes(), a[ix].im.to_be_bytes()].concat())
        .collect();
    write_npy_raw(&pa, ">c16", true, &[m, k], &af);
    let bb: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
    write_npy_raw(&pb, "<f8", false, &[k, n], &bb);
    let out = dir.join("C.npy");
    let list = format!("{},{}", pa.display(), pb.display());
    let (code, s, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--inputs",
        &list,
        "--procs",
        "3",
        "--check",
        "--dtype",
        "c128",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{s}{err}");
    assert!(s.contains(": ok"), "{s}");
    assert!(
        err.contains("B.npy holds float64; converted to complex128"),
        "{err}"
    );
    let bytes = std::fs::read(&out).unwrap();
    assert!(String::from_utf8_lossy(&bytes[..64]).contains("'descr': '<c16'"));
    let got: Vec<Complex64> = deinsum::exec::npy::read_operand_block(
        &out,
        &deinsum::expr::Operand::new(vec![
            deinsum::expr::Dim::Index('i'),
            deinsum::expr::Dim::Index('k'),
        ]),
        &[('i', m), ('k', n)].into_iter().collect(),
        &deinsum::plan::Block::full(&[m, n]),
    )
    .unwrap();
    let want: Vec<Complex64> = (0..m * n)
        .map(|ix| (0..k).map(|j| a[ix / n * k + j] * b[j * n + ix % n]).sum())
        .collect();
    let (_, rel) = deinsum::exec::reference::max_error(&got, &want);
    assert!(rel < 1e-13, "{rel}");
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--inputs", &list]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Z.npy") && err.contains("complex --dtype"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--gemm blas`: in a build with the feature, the run checks (complex too); without it, exit
/// 2 naming the feature. An unknown library is clap's usage error.
#[test]
fn gemm_blas_runs_with_the_feature_and_is_refused_without() {
    let args = |dtype| {
        [
            "run",
            "ij,jk->ik",
            "--size",
            "40",
            "--procs",
            "3",
            "--gemm",
            "blas",
            "--check",
            "--dtype",
            dtype,
        ]
    };
    for dtype in ["f64", "c128"] {
        let (code, out, err) = deinsum(&args(dtype));
        if cfg!(feature = "blas-external") {
            assert_eq!(code, 0, "{out}{err}");
            assert!(out.contains(": ok"), "{out}");
        } else {
            assert_eq!(code, 2, "{out}{err}");
            assert!(err.contains("without the cargo feature `blas`"), "{err}");
        }
    }
    let (code, _, err) = deinsum(&["run", "ij,jk->ik", "--size", "4", "--gemm", "mkl"]);
    assert_eq!(code, 2);
    assert!(err.contains("possible values: faer, blas"), "{err}");
}
