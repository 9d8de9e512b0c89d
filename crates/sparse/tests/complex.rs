//! Complex sparse einsums (c128 and c64) through the library's per-rank run: every built form
//! (SpMV and SpMM on the row cut and the fine-grain scheme, SDDMM, SpGEMM, MTTKRP) on
//! P = 1..16 in-process ranks, with extents no P divides, equals the serial reference
//! (checked in complex: the magnitude of the difference), equals the one-rank result, moves
//! exactly the predicted bytes (16 or 8 per value), and has imaginary parts (a run that lost
//! them would also fail the check). The writers round-trip complex results through the
//! readers; FROSTT refuses them.

use deinsum_exec::scalar::{Complex32, Complex64};
use deinsum_exec::{Communicator, InProcess, Scalar};
use deinsum_expr::ParsedEinsum;
use deinsum_sparse::einsum::{
    self as se, Check, DenseOperand, RunOptions, Scheme, SparseJob, SparseOutput, SparseReport,
};
use deinsum_sparse::{gen, io, SparseTensor};

/// `expr` with extents `sizes` (`i=13,j=11`).
fn einsum(expr: &str, sizes: &str) -> ParsedEinsum {
    let spec = deinsum_expr::ExtentSpec {
        sizes: deinsum_expr::parse_sizes(sizes).unwrap(),
        ..Default::default()
    };
    deinsum_expr::parse(expr, &spec).unwrap()
}

/// The job of `expr` with operands `sparse` generated at `density` (seed 7 plus the operand,
/// complex parts from the seeded generator) and the others seeded.
fn make_job<T: Scalar>(
    expr: &str,
    sizes: &str,
    sparse: &[usize],
    density: f64,
    scheme: Scheme,
) -> SparseJob<T> {
    let e = einsum(expr, sizes);
    let tensors = sparse
        .iter()
        .map(|&k| {
            let shape: Vec<usize> = e.inputs()[k].indices.iter().map(|&c| e.extent(c)).collect();
            gen::uniform::<T>(&shape, density, 7 + k as u64).unwrap()
        })
        .collect();
    SparseJob::new(e, sparse, tensors, |_| DenseOperand::Seeded(3), scheme).unwrap()
}

/// Runs `job` on `procs` in-process ranks and returns the report.
fn run<T: Scalar>(job: &SparseJob<T>, procs: usize) -> SparseReport<T> {
    let plan = job.plan(procs).unwrap();
    let outs = InProcess::new(procs)
        .unwrap()
        .run(|comm| {
            assert_eq!(comm.size(), procs);
            se::run_rank(comm, job, &plan, &RunOptions::default())
        })
        .unwrap();
    SparseReport::new(job, &plan, outs).unwrap()
}

/// The cases: every form, extents that no P in 2..=16 divides evenly (primes), empty rows in
/// the sparse operands at these densities.
const CASES: [(&str, &str, &[usize], f64, Scheme); 7] = [
    ("ij,j->i", "i=37,j=37", &[0], 0.1, Scheme::Rows),
    ("ij,j->i", "i=37,j=37", &[0], 0.1, Scheme::Fine),
    ("ij,jk->ik", "i=31,j=23,k=3", &[0], 0.12, Scheme::Auto),
    ("ij,ik,jk->ij", "i=29,j=19,k=4", &[0], 0.12, Scheme::Auto),
    ("ij,jk->ik", "i=29,j=31,k=17", &[0, 1], 0.1, Scheme::Auto),
    (
        "ijk,ja,ka->ia",
        "i=11,j=7,k=5,a=3",
        &[0],
        0.15,
        Scheme::Auto,
    ),
    (
        "ijk,ia,ka->ja",
        "i=11,j=7,k=5,a=3",
        &[0],
        0.15,
        Scheme::Auto,
    ),
];

/// Every case at every P in `procs`: the check, the one-rank result and the planned bytes.
fn every_case<T: Scalar>(procs: &[usize]) {
    let tol = T::DTYPE.tolerance();
    for (expr, sizes, sparse, density, scheme) in CASES {
        let job = make_job::<T>(expr, sizes, sparse, density, scheme);
        let one = run(&job, 1).output.to_dense();
        let imag = one.iter().map(|v| v.parts().1.abs()).fold(0.0, f64::max);
        assert!(imag > 0.1, "{expr} {}: no imaginary parts", T::DTYPE);
        for &p in procs {
            let what = format!("{expr} {sizes} {scheme:?} {} P={p}", T::DTYPE);
            let report = run(&job, p);
            assert!(
                report.exact(),
                "{what}: {:?} vs {:?}",
                report.predicted,
                report.measured
            );
            let check = Check::of(&job, &report.output).unwrap();
            assert!(check.max_rel <= tol, "{what}: {check:?}");
            let (_, rel) = deinsum_exec::reference::max_error(&report.output.to_dense(), &one);
            assert!(rel <= tol, "{what}: {rel:e} from the one-rank result");
        }
    }
}

#[test]
fn c128_sparse_equals_serial_for_1_to_16_ranks() {
    every_case::<Complex64>(&(1..=16).collect::<Vec<_>>());
}

#[test]
fn c64_sparse_equals_serial_for_1_to_16_ranks() {
    every_case::<Complex32>(&(1..=16).collect::<Vec<_>>());
}

/// The bytes per value are the type's: a c128 run moves twice the f64 run's words' bytes, a
/// c64 run the f64 run's (SpMM's row halo: values only).
#[test]
fn complex_words_are_16_or_8_bytes() {
    let (expr, sizes) = ("ij,jk->ik", "i=31,j=23,k=3");
    let f = run(&make_job::<f64>(expr, sizes, &[0], 0.12, Scheme::Auto), 5);
    let z = run(
        &make_job::<Complex64>(expr, sizes, &[0], 0.12, Scheme::Auto),
        5,
    );
    let c = run(
        &make_job::<Complex32>(expr, sizes, &[0], 0.12, Scheme::Auto),
        5,
    );
    assert!(f.measured.iter().any(|&(r, _)| r > 0), "no halo moved");
    for r in 0..5 {
        assert_eq!(z.measured[r].0, 2 * f.measured[r].0, "rank {r}");
        assert_eq!(c.measured[r].0, f.measured[r].0, "rank {r}");
    }
    // The real parts of a complex run are the real run's (the generator's real parts are the
    // real values; products differ by the imaginary parts' contributions, so compare inputs).
    let jf = make_job::<f64>(expr, sizes, &[0], 0.12, Scheme::Auto);
    let jz = make_job::<Complex64>(expr, sizes, &[0], 0.12, Scheme::Auto);
    let re: Vec<f64> = jz.sparse()[0].values().iter().map(|v| v.re).collect();
    assert_eq!(re, jf.sparse()[0].values());
}

/// A complex result written as Matrix Market (`complex general`), SciPy `.npz` (complex128
/// data) and `.npy` (complex128) reads back equal; `.tns` is refused before anything is
/// written, naming the dtype.
#[test]
fn complex_results_round_trip_through_the_writers() {
    let dir = std::env::temp_dir().join(format!("deinsum-sparse-complex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = make_job::<Complex64>("ij,jk->ik", "i=29,j=31,k=17", &[0, 1], 0.1, Scheme::Auto);
    let report = run(&job, 3);
    let SparseOutput::Sparse(t) = &report.output else {
        panic!("SpGEMM's result is sparse")
    };
    assert!(t.nnz() > 0);
    for ext in ["mtx", "npz"] {
        let path = dir.join(format!("c.{ext}"));
        se::write_output(&report.output, &path).unwrap();
        let back = io::read::<Complex64>(&path, None).unwrap();
        assert_eq!(&back, t, ".{ext}");
        // A complex file is refused as a real type (its imaginary parts would be lost).
        let err = io::read::<f64>(&path, None).unwrap_err().to_string();
        assert!(err.contains("c128"), ".{ext}: {err}");
    }
    let text = std::fs::read_to_string(dir.join("c.mtx")).unwrap();
    assert!(text.starts_with("%%MatrixMarket matrix coordinate complex general\n"));
    // c64 results are read back exactly too (their parts widen exactly to f64).
    let job32 = make_job::<Complex32>("ij,jk->ik", "i=29,j=31,k=17", &[0, 1], 0.1, Scheme::Auto);
    let r32 = run(&job32, 2);
    let mtx = dir.join("c64.mtx");
    se::write_output(&r32.output, &mtx).unwrap();
    assert_eq!(
        SparseOutput::Sparse(io::read::<Complex32>(&mtx, None).unwrap()),
        r32.output
    );
    // Densified .npy: complex128, the stored values at their coordinates.
    let npy = dir.join("c.npy");
    se::write_output(&report.output, &npy).unwrap();
    let bytes = std::fs::read(&npy).unwrap();
    let head = String::from_utf8_lossy(&bytes[..128]).to_string();
    assert!(head.contains("'descr': '<c16'"), "{head}");
    let body = &bytes[bytes.len() - 16 * 29 * 17..];
    let mut dense: Vec<Complex64> = Vec::new();
    Complex64::from_bytes(body, &mut dense);
    assert_eq!(dense, t.to_dense());
    // A dense complex result as .npy keeps its type.
    let spmm = make_job::<Complex32>("ij,jk->ik", "i=31,j=23,k=3", &[0], 0.12, Scheme::Auto);
    let out = run(&spmm, 2).output;
    let p = dir.join("d.npy");
    se::write_output(&out, &p).unwrap();
    let head = String::from_utf8_lossy(&std::fs::read(&p).unwrap()[..128]).to_string();
    assert!(head.contains("'descr': '<c8'"), "{head}");
    // FROSTT: refused before the run, and by the writer.
    let tns = dir.join("c.tns");
    let err = se::check_output_file(
        job.form(),
        &job.output_shape(),
        Complex64::DTYPE,
        &tns,
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("complex128") && err.contains(".mtx"), "{err}");
    assert!(se::write_output(&report.output, &tns).is_err());
    assert!(!tns.exists(), "a refused .tns was written");
    let real_ok = se::check_output_file(job.form(), &job.output_shape(), f64::DTYPE, &tns, None);
    assert!(real_ok.is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A complex `SparseTensor` with a non-finite part is refused by the text writers, naming
/// the value as NumPy prints it.
#[test]
fn non_finite_complex_values_are_refused() {
    let dir = std::env::temp_dir().join(format!("deinsum-sparse-nan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = SparseTensor::from_entries(
        vec![2, 2],
        vec![0, 1, 1, 0],
        vec![Complex64::new(1.0, 2.0), Complex64::new(0.5, f64::NAN)],
    )
    .unwrap();
    let err = io::write(&dir.join("x.mtx"), &t).unwrap_err().to_string();
    assert!(err.contains("(0.5+NaNj)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
