//! The facade's sparse einsums ([`deinsum::SparseEinsum`]): SpMV, SpMM, SDDMM, SpGEMM and
//! MTTKRP compiled from operands and run on in-process ranks, each result against a dense
//! serial reference at P = 1, 2, 3, 5, 8, in f64 and f32, every rank moving exactly the
//! planned bytes.

use deinsum::sparse::einsum::Check;
use deinsum::sparse::{gen, SparseTensor};
use deinsum::{Operand, Scalar, SparseEinsum, SparseOptions};

fn dense<T: Scalar>(shape: &[usize], seed: u64) -> Operand<T> {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|x| T::from_f64(deinsum::exec::data::seeded_value(seed, 9, x as u64)))
        .collect();
    Operand::Dense {
        shape: shape.to_vec(),
        data,
    }
}

fn sparse<T: Scalar>(shape: &[usize], density: f64, seed: u64) -> Operand<T> {
    Operand::Sparse(gen::uniform::<T>(shape, density, seed).unwrap())
}

/// Every built form with its operands.
fn cases<T: Scalar>() -> Vec<(&'static str, Vec<Operand<T>>, &'static str)> {
    vec![
        (
            "ij,j->i",
            vec![sparse(&[23, 23], 0.15, 1), dense(&[23], 2)],
            "SpMV",
        ),
        (
            "ij,jk->ik",
            vec![sparse(&[19, 17], 0.2, 3), dense(&[17, 4], 4)],
            "SpMM",
        ),
        (
            "ij,ik,jk->ij",
            vec![
                sparse(&[13, 11], 0.3, 5),
                dense(&[13, 3], 6),
                dense(&[11, 3], 7),
            ],
            "SDDMM",
        ),
        (
            "ij,jk->ik",
            vec![sparse(&[16, 14], 0.2, 8), sparse(&[14, 12], 0.2, 9)],
            "SpGEMM",
        ),
        (
            "ijk,ja,ka->ia",
            vec![
                sparse(&[9, 8, 7], 0.1, 10),
                dense(&[8, 3], 11),
                dense(&[7, 3], 12),
            ],
            "MTTKRP",
        ),
    ]
}

/// The dense serial einsum of the operands (sparse ones densified), in f64.
fn reference<T: Scalar>(expr: &str, ops: &[Operand<T>]) -> Vec<f64> {
    let shapes: Vec<Vec<usize>> = ops
        .iter()
        .map(|o| match o {
            Operand::Dense { shape, .. } => shape.clone(),
            Operand::Sparse(t) => t.shape().to_vec(),
        })
        .collect();
    let spec = deinsum::expr::ExtentSpec {
        shapes: Some(shapes),
        ..Default::default()
    };
    let e = deinsum::expr::parse(expr, &spec).unwrap();
    let whole: Vec<Vec<f64>> = ops
        .iter()
        .map(|o| match o {
            Operand::Dense { data, .. } => data.iter().map(|v| v.to_f64()).collect(),
            Operand::Sparse(t) => t.to_dense().iter().map(|v| v.to_f64()).collect(),
        })
        .collect();
    deinsum::exec::reference::naive(&e, &|k, x| whole[k][x as usize])
}

fn check_all<T: Scalar>(tolerance: f64) {
    for (expr, ops, kernel) in cases::<T>() {
        let want = reference(expr, &ops);
        for p in [1, 2, 3, 5, 8] {
            let c = SparseEinsum::compile(expr, ops.clone(), &SparseOptions::procs(p)).unwrap();
            assert_eq!(c.kernel(), kernel);
            let report = c.run_local_report().unwrap();
            assert!(
                report.exact(),
                "{expr} P={p}: {:?} != {:?}",
                report.measured,
                report.predicted
            );
            let got: Vec<f64> = report
                .output
                .to_dense()
                .iter()
                .map(|v| v.to_f64())
                .collect();
            // A sparse result is compared densified (SDDMM outside its pattern is zero).
            let want = match kernel {
                "SDDMM" => {
                    let Operand::Sparse(s) = &ops[0] else {
                        unreachable!()
                    };
                    let mask = s.to_dense();
                    want.iter()
                        .zip(&mask)
                        .map(|(w, m)| if *m != T::default() { *w } else { 0.0 })
                        .collect()
                }
                _ => want.clone(),
            };
            let (_, rel) = deinsum::exec::reference::max_error(&got, &want);
            assert!(rel <= tolerance, "{expr} ({kernel}) P={p}: rel error {rel}");
            let check = Check::of(c.job(), &report.output).unwrap();
            assert!(check.max_rel <= tolerance, "{expr} P={p}: {check:?}");
        }
    }
}

#[test]
fn sparse_forms_equal_the_dense_serial_einsum_f64() {
    check_all::<f64>(1e-12);
}

#[test]
fn sparse_forms_equal_the_dense_serial_einsum_f32() {
    check_all::<f32>(1e-5);
}

#[test]
fn spgemm_returns_a_sparse_result_and_unbuilt_forms_are_refused() {
    let ops: Vec<Operand<f64>> = vec![sparse(&[6, 6], 0.3, 1), sparse(&[6, 6], 0.3, 2)];
    let c = SparseEinsum::compile("ij,jk->ik", ops, &SparseOptions::procs(2)).unwrap();
    assert!(matches!(
        c.run_local().unwrap(),
        deinsum::sparse::einsum::SparseOutput::Sparse(_)
    ));
    let t: SparseTensor<f64> = gen::uniform(&[4, 4], 0.5, 3).unwrap();
    let err = SparseEinsum::compile(
        "ij,jk->ik",
        vec![dense(&[4, 4], 1), Operand::Sparse(t)],
        &SparseOptions::procs(2),
    )
    .unwrap_err();
    assert!(err.to_string().contains("is not built yet"), "{err}");
}
