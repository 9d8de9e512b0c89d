//! Einsums with an index of extent 0 (issue 37 item 4): NumPy's meaning, an empty output or
//! zeros where the empty index is summed, from the library and the CLI; their plans build and
//! move nothing.

mod cli_support;
use cli_support::deinsum;

use deinsum::expr::ExtentSpec;
use deinsum::{Einsum, Inputs, Options};

/// Compiles `expr` for `shapes` on `procs` ranks and runs it in process on operands of ones.
fn run(expr: &str, shapes: &[&[usize]], procs: usize) -> (Vec<usize>, Vec<f64>) {
    let spec = ExtentSpec {
        shapes: Some(shapes.iter().map(|s| s.to_vec()).collect()),
        ..ExtentSpec::default()
    };
    let e = Einsum::compile(expr, &spec, &Options::procs(procs)).unwrap();
    let plan = e.plan();
    assert_eq!(plan.prediction.total, 0, "{expr}: nothing moves");
    assert_eq!(plan.prediction.max_peak_memory, 0, "{expr}");
    let ops: Vec<Vec<f64>> = shapes
        .iter()
        .map(|s| vec![1.0; s.iter().product()])
        .collect();
    let out = e.run_local(&Inputs::Full(ops.clone())).unwrap();
    let lent: Vec<&[f64]> = ops.iter().map(|v| v.as_slice()).collect();
    let borrowed = e
        .run_local_borrowed(&lent, &deinsum::ExecOptions::default())
        .unwrap();
    assert_eq!(out, borrowed, "{expr}");
    let einsum = &plan.einsum;
    let shape = einsum.output().iter().map(|c| einsum.extent(*c)).collect();
    (shape, out)
}

#[test]
fn empty_outputs_and_zero_sums_as_numpy() {
    for procs in [1, 2, 3, 4] {
        // (0,5)@(5,3) -> (0,3): empty.
        assert_eq!(
            run("ij,jk->ik", &[&[0, 5], &[5, 3]], procs),
            (vec![0, 3], vec![])
        );
        // (5,0)@(0,3) -> zeros(5,3).
        assert_eq!(
            run("ij,jk->ik", &[&[5, 0], &[0, 3]], procs),
            (vec![5, 3], vec![0.0; 15])
        );
        // A (0,0) trace is 0.
        assert_eq!(run("ii->", &[&[0, 0]], procs), (vec![], vec![0.0]));
        // A zero batch dimension, kept and summed.
        assert_eq!(
            run("bij,bjk->bik", &[&[0, 2, 3], &[0, 3, 4]], procs).0,
            vec![0, 2, 4]
        );
        assert_eq!(
            run("bij,bjk->ik", &[&[0, 2, 3], &[0, 3, 4]], procs),
            (vec![2, 4], vec![0.0; 8])
        );
        // Zero inside `...`, broadcast against 1.
        assert_eq!(
            run("...ij,...jk->...ik", &[&[2, 0, 3, 4], &[1, 1, 4, 5]], procs).0,
            vec![2, 0, 3, 5]
        );
        // A zero in a chain.
        assert_eq!(
            run(
                "ab,bc,cd,de->ae",
                &[&[3, 4], &[4, 0], &[0, 5], &[5, 6]],
                procs
            ),
            (vec![3, 6], vec![0.0; 18])
        );
    }
}

#[test]
fn plan_json_of_an_empty_einsum_reads_back() {
    let spec = ExtentSpec::from_flags(None, None, Some("0x5,5x3")).unwrap();
    let e = Einsum::compile("ij,jk->ik", &spec, &Options::procs(4)).unwrap();
    let json = serde_json::to_string(e.plan()).unwrap();
    let back = deinsum::plan::Plan::from_json(&json).unwrap();
    assert_eq!(&back, e.plan());
    assert_eq!(back.einsum.extent('i'), 0);
    assert!(back
        .tensors
        .iter()
        .all(|t| t.kind != deinsum::plan::TensorKind::Output || t.shape == vec![0, 3]));
}

#[test]
fn cli_plans_and_runs_zero_extents() {
    let (code, out, err) = deinsum(&["plan", "ij,jk->ik", "--shapes", "0x5,5x3", "--procs", "4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("extents i=0,j=5,k=3"), "{out}");
    assert!(
        out.contains("predicted words received: max/rank 0, total 0"),
        "{out}"
    );
    let (code, out, err) = deinsum(&["parse", "ij,jk->ik", "--sizes", "i=3,j=0,k=2"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = deinsum(&[
        "run",
        "ij,jk->ik",
        "--shapes",
        "5x0,0x3",
        "--procs",
        "2",
        "--check",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("words moved 0 (predicted 0)"), "{out}");
}
