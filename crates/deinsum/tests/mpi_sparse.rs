//! The distributed sparse kernels on MPI (the same code as in process, over `MpiComm`): SpMM,
//! the fine-grain SpMV/SpMM, SDDMM, SpGEMM and MTTKRP in every mode and on every grid equal to dense serial references with the sparse
//! operands densified, and every rank's measured bytes equal to its plan's prediction; inputs
//! with empty rows, empty ranks (more ranks than rows), duplicates and explicit zeros. Then
//! every form in c128 and c64 through the library's per-rank run (`complex_forms`).
//!
//! `cargo test -p deinsum --features mpi --test mpi_sparse` (relaunches under mpirun).

mod mpi_support;

use deinsum::exec::mpi::MpiComm;
use deinsum::Communicator;
use deinsum_sparse::dist::{self, MttkrpPlan, SpgemmPlan};
use deinsum_sparse::fine::{self, FinePlan};
use deinsum_sparse::halo::{self, HaloPlan};
use deinsum_sparse::{gen, SparseTensor};
use mpi_support::{rel_err, Checks};
use std::process::ExitCode;

fn dense(n: usize, salt: usize) -> Vec<f64> {
    (0..n)
        .map(|x| ((x * 7919 + salt * 104_729) % 113) as f64 / 113.0 - 0.5)
        .collect()
}

fn dense_mm(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * k];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                c[i * k + l] += a[i * n + j] * b[j * k + l];
            }
        }
    }
    c
}

/// Every rank's rows of a distributed result gathered on every rank (rank order).
fn gather_all(w: &MpiComm, mine: &[f64]) -> Vec<f64> {
    let mut counts = vec![0u64; w.size()];
    counts[w.rank()] = mine.len() as u64;
    w.or_abort(w.all_reduce_max_u64(&mut counts));
    let counts: Vec<usize> = counts.iter().map(|&c| c as usize).collect();
    w.or_abort(w.all_gather_v(mine, &counts))
}

/// Bytes this rank received and sent while `f` ran, with its result.
fn measured<R>(w: &MpiComm, f: impl FnOnce() -> R) -> (R, u64, u64) {
    let before = w.traffic();
    let out = f();
    let after = w.traffic();
    (
        out,
        after.received - before.received,
        after.sent - before.sent,
    )
}

/// The test matrices: square, rectangular, empty rows with duplicates and an explicit zero,
/// tiny (more ranks than rows at -n 8), and R-MAT (non-symmetric, hubs: the fine-grain
/// SpMV both fetches and pushes).
fn matrices() -> Vec<(&'static str, SparseTensor<f64>)> {
    let mut coords = Vec::new();
    let mut vals = Vec::new();
    for i in (0..24).step_by(3) {
        coords.extend([i, (i * 7) % 24, i, (i * 7) % 24]);
        vals.extend([1.0 + i as f64, 0.5]);
    }
    coords.extend([4, 4]);
    vals.push(0.0);
    vec![
        ("square", gen::uniform(&[29, 29], 0.1, 3).unwrap()),
        ("rect", gen::uniform(&[17, 23], 0.12, 4).unwrap()),
        (
            "empty rows, duplicates, zero",
            SparseTensor::from_entries(vec![24, 24], coords, vals).unwrap(),
        ),
        ("tiny", gen::uniform(&[3, 3], 0.7, 5).unwrap()),
        ("rmat", gen::rmat(6, 4, 7).unwrap()),
    ]
}

fn body(w: &MpiComm, c: &mut Checks) {
    let (p, me) = (w.size(), w.rank());
    for (name, a) in matrices() {
        let (m, n) = (a.shape()[0], a.shape()[1]);
        let csr = a.to_csr().unwrap();
        let ad = a.to_dense();
        // SpMM (k = 3) and SDDMM (r = 3) share the plan of A's pattern.
        let k = 3;
        let plan = HaloPlan::build(&csr, k, p).unwrap();
        let (lo, hi) = (plan.a_cuts[me], plan.a_cuts[me + 1]);
        let (blo, bhi) = (plan.b_cuts()[me], plan.b_cuts()[me + 1]);
        let a_local = csr.rows(lo, hi);
        let b = dense(n * k, 1);
        let (got, recv, sent) = measured(w, || {
            w.or_abort(halo::spmm(w, &plan, &a_local, &b[blo * k..bhi * k]))
        });
        c.eq(
            recv,
            8 * plan.received_words(me),
            &format!("{name} SpMM received"),
        );
        c.eq(sent, 8 * plan.sent_words(me), &format!("{name} SpMM sent"));
        let all = gather_all(w, &got);
        let e = rel_err(&all, &dense_mm(&ad, &b, m, n, k));
        c.check(e <= 1e-12, || format!("{name} SpMM error {e}"));
        if m == n {
            // The fine-grain SpMV (k = 1) and SpMM (k = 3): fetched x rows and pushed partial
            // y rows in one exchange, the words as planned.
            for kk in [1, 3] {
                let fp = FinePlan::build(&csr, kk, p).unwrap();
                let x = dense(n * kk, 4);
                let (got, recv, sent) = measured(w, || {
                    w.or_abort(fine::spmv(
                        w,
                        &fp,
                        &csr,
                        &x[fp.cuts[me] * kk..fp.cuts[me + 1] * kk],
                    ))
                });
                let what = format!("{name} fine-grain k={kk}");
                c.eq(recv, 8 * fp.received_words(me), &format!("{what} received"));
                c.eq(sent, 8 * fp.sent_words(me), &format!("{what} sent"));
                let all = gather_all(w, &got);
                let e = rel_err(&all, &dense_mm(&ad, &x, m, n, kk));
                c.check(e <= 1e-12, || format!("{what} error {e}"));
            }
        }
        let u = dense(m * k, 2);
        let (got, recv, _) = measured(w, || {
            w.or_abort(halo::sddmm(
                w,
                &plan,
                &a_local,
                &u[lo * k..hi * k],
                &b[blo * k..bhi * k],
            ))
        });
        c.eq(
            recv,
            8 * plan.received_words(me),
            &format!("{name} SDDMM received"),
        );
        let all = gather_all(w, &got);
        let want: Vec<f64> = (0..a.nnz())
            .map(|e| {
                let (i, j) = (a.coord(e)[0], a.coord(e)[1]);
                let dot: f64 = (0..k).map(|q| u[i * k + q] * b[j * k + q]).sum();
                ad[i * n + j] * dot
            })
            .collect();
        let e = rel_err(&all, &want);
        c.check(e <= 1e-12, || format!("{name} SDDMM error {e}"));
        // SpGEMM A * A^T-shaped partner: A times a sparse n x 7 matrix (A * A when square).
        let bs = if m == n {
            a.clone()
        } else {
            gen::uniform(&[n, 7], 0.2, 6).unwrap()
        };
        let bcsr = bs.to_csr().unwrap();
        let gp = SpgemmPlan::build(&csr, &bcsr, p).unwrap();
        let f = &gp.fetch;
        let (cl, recv, sent) = measured(w, || {
            w.or_abort(dist::spgemm(
                w,
                &gp,
                &csr.rows(gp.a_cuts[me], gp.a_cuts[me + 1]),
                &bcsr.rows(f.cuts[me], f.cuts[me + 1]),
            ))
        });
        c.eq(
            recv,
            gp.received_bytes(me, 8),
            &format!("{name} SpGEMM received"),
        );
        c.eq(sent, gp.sent_bytes(me, 8), &format!("{name} SpGEMM sent"));
        let all = gather_all(w, &cl.to_tensor().to_dense());
        let e = rel_err(&all, &dense_mm(&ad, &bs.to_dense(), m, n, bcsr.ncols));
        c.check(e <= 1e-12, || format!("{name} SpGEMM error {e}"));
    }
    // MTTKRP in every mode of an order-3 tensor with duplicates and an explicit zero.
    let mut x = gen::uniform::<f64>(&[9, 7, 6], 0.1, 8).unwrap();
    let mut coords: Vec<usize> = (0..x.nnz()).flat_map(|e| x.coord(e).to_vec()).collect();
    let mut vals = x.values().to_vec();
    coords.extend([0, 0, 0, 0, 0, 0, 8, 6, 5]);
    vals.extend([1.0, -1.0, 0.0]);
    x = SparseTensor::from_entries(vec![9, 7, 6], coords, vals).unwrap();
    let r = 4;
    let fs: Vec<Vec<f64>> = (0..3).map(|m| dense(x.shape()[m] * r, m + 3)).collect();
    let xd = x.to_dense();
    // The chosen grid, then every grid it was chosen from (the 1D cut and the 2D ones).
    let plans = (0..3).flat_map(|mode| {
        let chosen = MttkrpPlan::build(&x, mode, r, p).unwrap();
        let others: Vec<MttkrpPlan> = chosen
            .considered
            .iter()
            .map(|g| MttkrpPlan::build_grid(&x, mode, r, p, &g.splits).unwrap())
            .collect();
        std::iter::once(chosen).chain(others)
    });
    for plan in plans {
        let mode_grid = format!("{} grid {:?}", plan.mode, plan.grid);
        let local = plan.local_part(&x, me).unwrap();
        let views: Vec<&[f64]> = (0..3)
            .map(|m| &fs[m][plan.cuts[m][me] * r..plan.cuts[m][me + 1] * r])
            .collect();
        let (got, recv, sent) = measured(w, || w.or_abort(dist::mttkrp(w, &plan, &local, &views)));
        c.eq(
            recv,
            8 * plan.received_words(me),
            &format!("MTTKRP mode {mode_grid} received"),
        );
        c.eq(
            sent,
            8 * plan.sent_words(me),
            &format!("MTTKRP mode {mode_grid} sent"),
        );
        let all = gather_all(w, &got);
        let mode = plan.mode;
        let mut want = vec![0.0; x.shape()[mode] * r];
        for (lin, &v) in xd.iter().enumerate() {
            let cc = [lin / 42, (lin / 6) % 7, lin % 6];
            for q in 0..r {
                let t: f64 = (0..3)
                    .filter(|&m| m != mode)
                    .map(|m| fs[m][cc[m] * r + q])
                    .product();
                want[cc[mode] * r + q] += v * t;
            }
        }
        let e = rel_err(&all, &want);
        c.check(e <= 1e-12, || format!("MTTKRP mode {mode_grid} error {e}"));
    }
}

/// `expr` with extents `sizes`.
fn parsed(expr: &str, sizes: &str) -> deinsum_expr::ParsedEinsum {
    let spec = deinsum_expr::ExtentSpec {
        sizes: deinsum_expr::parse_sizes(sizes).unwrap(),
        ..Default::default()
    };
    deinsum_expr::parse(expr, &spec).unwrap()
}

/// Every sparse form in `T` (complex) through the library's per-rank run on the MPI world:
/// the gathered result on rank 0 against the serial reference (checked in complex, the
/// dtype's tolerance) and every rank's bytes as planned; extents no world size divides.
fn complex_forms<T: deinsum::Scalar>(w: &MpiComm, c: &mut Checks) {
    use deinsum_sparse::einsum::{self as se, Check, DenseOperand, RunOptions, Scheme, SparseJob};
    let p = w.size();
    let cases: [(&str, &str, &[usize], Scheme); 6] = [
        ("ij,j->i", "i=37,j=37", &[0], Scheme::Rows),
        ("ij,j->i", "i=37,j=37", &[0], Scheme::Fine),
        ("ij,jk->ik", "i=31,j=23,k=3", &[0], Scheme::Auto),
        ("ij,ik,jk->ij", "i=29,j=19,k=4", &[0], Scheme::Auto),
        ("ij,jk->ik", "i=29,j=31,k=17", &[0, 1], Scheme::Auto),
        ("ijk,ja,ka->ia", "i=11,j=7,k=5,a=3", &[0], Scheme::Auto),
    ];
    for (expr, sizes, sparse, scheme) in cases {
        let what = format!("{expr} {sizes} {scheme:?} {}", T::DTYPE);
        let e = parsed(expr, sizes);
        let tensors = sparse
            .iter()
            .map(|&k| {
                let shape: Vec<usize> =
                    e.inputs()[k].indices.iter().map(|&x| e.extent(x)).collect();
                gen::uniform::<T>(&shape, 0.12, 7 + k as u64).unwrap()
            })
            .collect();
        let job = SparseJob::new(e, sparse, tensors, |_| DenseOperand::Seeded(3), scheme).unwrap();
        let plan = job.plan(p).unwrap();
        let mine = w.or_abort(se::run_rank(w, &job, &plan, &RunOptions::default()));
        let Some(outs) = w.or_abort(se::gather_outcomes(w, mine)) else {
            continue;
        };
        let report = se::SparseReport::new(&job, &plan, outs).unwrap();
        c.check(report.exact(), || {
            format!(
                "{what}: bytes {:?} vs {:?}",
                report.measured, report.predicted
            )
        });
        let check = Check::of(&job, &report.output).unwrap();
        let tol = T::DTYPE.tolerance();
        c.check(check.max_rel <= tol, || format!("{what}: {check:?}"));
        let imag = report
            .output
            .to_dense()
            .iter()
            .map(|v| v.parts().1.abs())
            .fold(0.0, f64::max);
        c.check(imag > 0.1, || format!("{what}: no imaginary parts"));
    }
}

fn body_and_complex(w: &MpiComm, c: &mut Checks) {
    body(w, c);
    complex_forms::<deinsum::exec::scalar::Complex64>(w, c);
    complex_forms::<deinsum::exec::scalar::Complex32>(w, c);
}

fn main() -> ExitCode {
    mpi_support::main_with("mpi_sparse", body_and_complex)
}
