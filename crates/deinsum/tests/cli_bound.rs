//! `deinsum bound` end to end: partition, closed forms, JSON shape, input errors (exit 2).

use std::process::Command;

fn bound(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_deinsum"))
        .arg("bound")
        .args(args)
        .output()
        .expect("run deinsum");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    let (code, out, err) = bound(&a);
    assert_eq!(code, 0, "stderr: {err}");
    serde_json::from_str(&out).expect("valid JSON")
}

#[test]
fn paper_example_is_mttkrp_then_matrix_product() {
    let v = json(&[
        "ijk,ja,ka,al->il",
        "--size",
        "64",
        "--mem",
        "1024",
        "--procs",
        "8",
    ]);
    let g = v["groups"].as_array().unwrap();
    assert_eq!(g.len(), 2);
    assert_eq!(g[0]["einsum"], "ijk,ja,ka->ia");
    assert_eq!(g[0]["indices"], "ijka");
    assert_eq!(g[1]["einsum"], "ia,al->il");
    for k in ["volume", "rho", "x0", "q"] {
        assert!(g[0][k].as_f64().unwrap() > 0.0, "{k}");
    }
    for c in ["i", "j", "k", "a"] {
        assert!(g[0]["tile"][c].as_f64().unwrap() >= 1.0);
    }
    // Fused MTTKRP: X0 = 5S/2; the matrix product: X0 = 3S, Q = 2*64^3/sqrt(S).
    let x0 = g[0]["x0"].as_f64().unwrap();
    assert!((x0 / 2560.0 - 1.0).abs() < 0.01, "{x0}");
    let q1 = g[1]["q"].as_f64().unwrap();
    assert!(
        (q1 / (2.0 * 64f64.powi(3) / 32.0) - 1.0).abs() < 0.01,
        "{q1}"
    );
    let total = v["q_total"].as_f64().unwrap();
    let sum = g[0]["q"].as_f64().unwrap() + q1;
    assert!((total - sum - 2.0 * 64.0 * 64.0).abs() < 1e-6 * total);
    let pr = &v["per_rank"];
    assert!(pr["memory_independent"].as_f64().unwrap() > 0.0);
    assert!(pr["memory_dependent"].as_f64().unwrap() > 0.0);
    assert!(v["runner_up"]["q_total"].as_f64().unwrap() > total);
}

#[test]
fn matrix_product_closed_form_and_parallel_bound() {
    let v = json(&[
        "ik,kj->ij",
        "--size",
        "2048",
        "--mem",
        "4096",
        "--procs",
        "64",
    ]);
    let g = &v["groups"][0];
    let want = 2.0 * 2048f64.powi(3) / 64.0;
    assert!((g["q"].as_f64().unwrap() / want - 1.0).abs() < 0.01);
    assert!((g["rho"].as_f64().unwrap() / 32.0 - 1.0).abs() < 0.01);
    let mi = g["per_rank"]["memory_independent"].as_f64().unwrap();
    let want_mi = 3.0 * (2048f64.powi(3) / 64.0).powf(2.0 / 3.0);
    assert!((mi / want_mi - 1.0).abs() < 0.01, "{mi} vs {want_mi}");
    assert!(v["runner_up"].is_null());
}

#[test]
fn text_report_names_groups_and_totals() {
    let (code, out, err) = bound(&["ijk,ja,ka,al->il", "--size", "64", "--mem", "1024"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("group 0: ijk,ja,ka->ia"), "{out}");
    assert!(out.contains("group 1: ia,al->il"), "{out}");
    assert!(out.contains("total Q ="), "{out}");
    assert!(out.contains("runner-up partition"), "{out}");
}

#[test]
fn io_path_cost_runs() {
    let v = json(&[
        "ij,jk,kl->il",
        "--sizes",
        "i=100,j=2000,k=100,l=2000",
        "--mem",
        "256",
        "--path-cost",
        "io",
    ]);
    assert!(v["q_total"].as_f64().unwrap() > 0.0);
}

#[test]
fn input_errors_exit_2() {
    for (args, needle) in [
        (vec!["ik,kj->ij", "--size", "8"], "--mem"),
        (vec!["ik,kj->ij", "--size", "8", "--mem", "0"], "--mem"),
        (vec!["ik,kj->ij", "--size", "8", "--mem", "-3"], "--mem"),
        (vec!["ik,kj->ij", "--size", "8", "--mem", "lots"], "--mem"),
        (
            vec!["ik,kj->ij", "--size", "8", "--mem", "64", "--procs", "0"],
            "--procs",
        ),
        (
            vec![
                "ik,kj->ij",
                "--size",
                "8",
                "--mem",
                "64",
                "--path-cost",
                "x",
            ],
            "--path-cost",
        ),
        (vec!["ik,kj->iz", "--size", "8", "--mem", "64"], ""),
    ] {
        let (code, out, err) = bound(&args);
        assert_eq!(code, 2, "{args:?}: stdout {out} stderr {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.is_empty());
    }
}
