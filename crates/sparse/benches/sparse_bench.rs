//! The sparse kernels' bench driver (run by `benches/sparse.sh`, which times SciPy on the same
//! matrices in the same run): writes each generated matrix as `.npz` arrays for the Python
//! side, then prints one JSON line per measurement (median seconds over `--reps`).
//!
//! `cargo bench -p deinsum-sparse --bench sparse_bench -- --dir D [--scale 18] [--gemm-scale 16]
//! [--reps 5] [--k 16] [--only-spmm]`

use deinsum_exec::{Communicator, InProcess, LocalComm};
use deinsum_sparse::dist::{self, MttkrpPlan, SpgemmPlan};
use deinsum_sparse::fine::{self, FineLocal, FinePlan};
use deinsum_sparse::halo::{self, HaloPlan};
use deinsum_sparse::{gen, kernels, Csr, SparseError, SparseTensor};
use ndarray::Array1;
use ndarray_npy::NpzWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn write_csr(path: &Path, a: &Csr<f64>) {
    let f = std::fs::File::create(path).expect("create npz");
    let mut w = NpzWriter::new(f);
    let ints = |v: &[usize]| Array1::from_iter(v.iter().map(|&x| x as i64));
    w.add_array("indptr", &ints(&a.indptr)).unwrap();
    w.add_array("indices", &ints(&a.indices)).unwrap();
    w.add_array("data", &Array1::from_vec(a.vals.clone()))
        .unwrap();
    w.add_array(
        "shape",
        &Array1::from_vec(vec![a.nrows as i64, a.ncols as i64]),
    )
    .unwrap();
    w.finish().unwrap();
}

fn dense(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|x| deinsum_exec::data::seeded_value(seed, 7, x as u64))
        .collect()
}

/// Median over `reps` of the slowest rank's seconds for `step` on `procs` in-process ranks of
/// one thread each (communication on the rank's thread, the kernel on its one-thread pool);
/// `prepare` builds each rank's inspector state (its blocks, localized columns) before timing.
fn ranks_time<S>(
    procs: usize,
    reps: usize,
    prepare: impl Fn(&LocalComm) -> Result<S, SparseError> + Sync,
    step: impl Fn(&LocalComm, &S, &rayon::ThreadPool) -> Result<(), SparseError> + Sync,
) -> f64 {
    let world = InProcess::new(procs).unwrap();
    let times = world
        .run(|comm| {
            let state = prepare(comm)?;
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .map_err(|e| SparseError::Shape(e.to_string()))?;
            let mut ts = Vec::new();
            for rep in 0..=reps {
                comm.barrier()?;
                let t = Instant::now();
                step(comm, &state, &pool)?;
                let mut s = [t.elapsed().as_nanos() as u64];
                comm.all_reduce_max_u64(&mut s)?;
                if rep > 0 {
                    ts.push(s[0] as f64 * 1e-9);
                }
            }
            Ok::<_, SparseError>(median(ts))
        })
        .unwrap();
    times[0]
}

/// The halo SpMM (or SpMV) of `a` and `b` (k wide) on `procs` ranks, and its plan.
fn spmm_time(a: &Csr<f64>, b: &[f64], k: usize, procs: usize, reps: usize) -> (f64, HaloPlan) {
    let plan = HaloPlan::build(a, k, procs).unwrap();
    let t = ranks_time(
        procs,
        reps,
        |comm| {
            let r = comm.rank();
            let a_local = a.rows(plan.a_cuts[r], plan.a_cuts[r + 1]);
            let b_local = b[plan.b_cuts()[r] * k..plan.b_cuts()[r + 1] * k].to_vec();
            Ok((halo::LocalRows::build(&plan, r, &a_local)?, b_local))
        },
        |comm, (local, b_local), pool| {
            std::hint::black_box(halo::spmm_local(comm, &plan, local, b_local, Some(pool))?);
            Ok(())
        },
    );
    (t, plan)
}

/// The distributed SDDMM of `s` with U, V (r wide) on `procs` ranks.
fn sddmm_time(s: &Csr<f64>, u: &[f64], v: &[f64], r: usize, procs: usize, reps: usize) -> f64 {
    let plan = HaloPlan::build(s, r, procs).unwrap();
    ranks_time(
        procs,
        reps,
        |comm| {
            let q = comm.rank();
            let (lo, hi) = (plan.a_cuts[q], plan.a_cuts[q + 1]);
            let s_local = s.rows(lo, hi);
            let (blo, bhi) = (plan.b_cuts()[q], plan.b_cuts()[q + 1]);
            Ok((
                halo::localize(&plan, q, &s_local)?,
                s_local,
                u[lo * r..hi * r].to_vec(),
                v[blo * r..bhi * r].to_vec(),
            ))
        },
        |comm, (local, s_local, u_local, v_local), pool| {
            let vx = halo::exchange_halo(comm, &plan, s_local, v_local)?;
            std::hint::black_box(pool.install(|| kernels::sddmm(local, u_local, &vx, r))?);
            Ok(())
        },
    )
}

/// The distributed SpGEMM `g * g` on `procs` ranks, and its plan.
fn spgemm_time(g: &Csr<f64>, procs: usize, reps: usize) -> (f64, SpgemmPlan) {
    let plan = SpgemmPlan::build(g, g, procs).unwrap();
    let t = ranks_time(
        procs,
        reps,
        |comm| {
            let q = comm.rank();
            let f = &plan.fetch;
            let a_local = g.rows(plan.a_cuts[q], plan.a_cuts[q + 1]);
            Ok((f.localize(q, &a_local)?, g.rows(f.cuts[q], f.cuts[q + 1])))
        },
        |comm, (local, b_local), pool| {
            let bx = plan.fetch.exchange_csr(comm, b_local)?;
            std::hint::black_box(pool.install(|| kernels::spgemm(local, &bx))?);
            Ok(())
        },
    );
    (t, plan)
}

/// The distributed sparse MTTKRP of `x` in mode 0 on `procs` ranks, and its plan.
fn mttkrp_time(
    x: &SparseTensor<f64>,
    fs: &[Vec<f64>],
    r: usize,
    procs: usize,
    reps: usize,
) -> (f64, MttkrpPlan) {
    let plan = MttkrpPlan::build(x, 0, r, procs).unwrap();
    let t = ranks_time(
        procs,
        reps,
        |comm| {
            let q = comm.rank();
            let blocks: Vec<Vec<f64>> = (0..x.order())
                .map(|m| fs[m][plan.cuts[m][q] * r..plan.cuts[m][q + 1] * r].to_vec())
                .collect();
            Ok((plan.local_part(x, q)?, blocks))
        },
        |comm, (local, blocks), pool| {
            let views: Vec<&[f64]> = blocks.iter().map(Vec::as_slice).collect();
            let fetched = dist::fetch_factors(comm, &plan, &views)?;
            let fv: Vec<&[f64]> = fetched.iter().map(Vec::as_slice).collect();
            let partial = pool.install(|| kernels::mttkrp_grouped(local, &fv, r))?;
            std::hint::black_box(dist::reduce_partial(comm, &plan, partial)?);
            Ok(())
        },
    );
    (t, plan)
}

/// The fine-grain SpMV/SpMM of `a` and `b` (k wide) on `procs` ranks, and its plan.
fn fine_time(a: &Csr<f64>, b: &[f64], k: usize, procs: usize, reps: usize) -> (f64, FinePlan) {
    let plan = FinePlan::build(a, k, procs).unwrap();
    let t = ranks_time(
        procs,
        reps,
        |comm| {
            let r = comm.rank();
            let x_local = b[plan.cuts[r] * k..plan.cuts[r + 1] * k].to_vec();
            Ok((FineLocal::build(&plan, r, a)?, x_local))
        },
        |comm, (local, x_local), pool| {
            std::hint::black_box(fine::spmv_local(comm, &plan, local, x_local, Some(pool))?);
            Ok(())
        },
    );
    (t, plan)
}

/// Words in all of the row cut and of the fine-grain scheme on `procs` ranks, and the words
/// of replicating the vector (k = 1); the fine-grain plan's imbalance and build seconds.
fn scheme_words(a: &Csr<f64>, procs: usize) -> ((u64, u64, u64), (f64, f64), f64) {
    let rows = HaloPlan::build(a, 1, procs).unwrap();
    let t = Instant::now();
    let fine = FinePlan::build(a, 1, procs).unwrap();
    let build = t.elapsed().as_secs_f64();
    let repl = (0..procs).map(|r| rows.replication_words(r)).sum();
    (
        (rows.total_received(), fine.total_received(), repl),
        (fine.imbalance(), fine.work_imbalance()),
        build,
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut dir, mut scale, mut gemm_scale, mut reps, mut k) =
        (PathBuf::from("."), 18u32, 16u32, 5usize, 16usize);
    // --only-spmm: SpMV and SpMM only (for quick A/B runs of those kernels).
    let mut only_spmm = false;
    // --only-spgemm: SpGEMM only.
    let mut only_spgemm = false;
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("flag value");
        match a.as_str() {
            "--dir" => dir = PathBuf::from(val()),
            "--scale" => scale = val().parse().unwrap(),
            "--gemm-scale" => gemm_scale = val().parse().unwrap(),
            "--reps" => reps = val().parse().unwrap(),
            "--k" => k = val().parse().unwrap(),
            "--only-spmm" => only_spmm = true,
            "--only-spgemm" => only_spgemm = true,
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    let a = gen::rmat::<f64>(if only_spgemm { 1 } else { scale }, 16, 1)
        .unwrap()
        .to_csr()
        .unwrap();
    write_csr(&dir.join(format!("rmat{scale}.npz")), &a);
    let n = a.nrows;
    // The fewest words any distribution of the vector could move under the P=2 row cut: one
    // per column both ranks touch (a column one rank alone touches could be its own), as a
    // share of replicating the vector.
    let free_p2 = {
        let plan = HaloPlan::build(&a, 1, 2).unwrap();
        let mut touched = vec![0u8; a.ncols];
        for r in 0..2 {
            let (lo, hi) = (a.indptr[plan.a_cuts[r]], a.indptr[plan.a_cuts[r + 1]]);
            for &j in &a.indices[lo..hi] {
                touched[j] |= 1 << r;
            }
        }
        touched.iter().filter(|&&t| t == 3).count() as f64 / a.ncols as f64
    };
    // Both schemes' words at P = 2, 4, 8 (k = 1; k columns multiply every figure by k); the
    // scheme in use is the one with fewer words in all at P = 2, as `deinsum run` picks it.
    // The fine-grain plan's build (the inspector: cover, balance, cut candidates) is timed once
    // per P, beside the kernel's seconds.
    let schemes: Vec<_> = [2, 4, 8].iter().map(|&p| scheme_words(&a, p)).collect();
    let words: Vec<(u64, u64, u64)> = schemes.iter().map(|s| s.0).collect();
    let use_fine = words[0].1 < words[0].0;
    let fine_imbalance: Vec<f64> = schemes.iter().map(|s| s.1 .0).collect();
    let fine_work: Vec<f64> = schemes.iter().map(|s| s.1 .1).collect();
    let fine_build: Vec<f64> = schemes.iter().map(|s| s.2).collect();
    for (name, kk) in [("spmv", 1), ("spmm", k)]
        .into_iter()
        .filter(|_| !only_spgemm)
    {
        let b = dense(n * kk, 2);
        let (t1, _) = spmm_time(&a, &b, kk, 1, reps);
        let (t2, imbalance) = if use_fine {
            let (t, plan) = fine_time(&a, &b, kk, 2, reps);
            (t, plan.imbalance())
        } else {
            let (t, plan) = spmm_time(&a, &b, kk, 2, reps);
            (t, plan.imbalance())
        };
        let share = |(rows, fine, repl): (u64, u64, u64)| {
            (rows as f64 / repl as f64, fine as f64 / repl as f64)
        };
        let (rows2, fine2) = share(words[0]);
        let (rows4, fine4) = share(words[1]);
        let (rows8, fine8) = share(words[2]);
        let in_use = |w: (u64, u64, u64)| if use_fine { w.1 } else { w.0 } * kk as u64;
        println!(
            "{{\"kernel\":\"{name}\",\"scale\":{scale},\"nnz\":{},\"k\":{kk},\"p1\":{t1},\"p2\":{t2},\"scheme\":\"{}\",\"words_p2\":{},\"words_p4\":{},\"words_p8\":{},\"replication_p2\":{},\"replication_p4\":{},\"imbalance\":{imbalance},\"rows_p2\":{rows2},\"rows_p4\":{rows4},\"rows_p8\":{rows8},\"fine_p2\":{fine2},\"fine_p4\":{fine4},\"fine_p8\":{fine8},\"fine_imbalance\":{fine_imbalance:?},\"fine_work_imbalance\":{fine_work:?},\"vertex_work\":{},\"fine_build\":{fine_build:?},\"free_p2\":{free_p2}}}",
            a.nnz(),
            if use_fine { "fine" } else { "rows" },
            in_use(words[0]),
            in_use(words[1]),
            in_use(words[2]),
            words[0].2 * kk as u64,
            words[1].2 * kk as u64,
            fine::VERTEX_WORK,
        );
    }
    if only_spmm {
        return;
    }
    if !only_spgemm {
        let r = 32;
        let (u, v) = (dense(n * r, 3), dense(n * r, 4));
        let t1 = sddmm_time(&a, &u, &v, r, 1, reps);
        let t2 = sddmm_time(&a, &u, &v, r, 2, reps);
        println!(
            "{{\"kernel\":\"sddmm\",\"scale\":{scale},\"nnz\":{},\"k\":{r},\"p1\":{t1},\"p2\":{t2}}}",
            a.nnz()
        );
    }
    drop(a);
    let g = gen::rmat::<f64>(gemm_scale, 16, 5)
        .unwrap()
        .to_csr()
        .unwrap();
    write_csr(&dir.join(format!("rmat{gemm_scale}.npz")), &g);
    let greps = reps.min(3);
    let (t1, _) = spgemm_time(&g, 1, greps);
    let (t2, plan) = spgemm_time(&g, 2, greps);
    let madds = plan.madds.iter().sum::<usize>();
    let repl: u64 = (0..2).map(|r| plan.replication_words(r)).sum();
    let halo: u64 = (0..2).map(|r| plan.received_words(r)).sum();
    println!("{{\"kernel\":\"spgemm\",\"scale\":{gemm_scale},\"nnz\":{},\"madds\":{madds},\"p1\":{t1},\"p2\":{t2},\"halo_words\":{halo},\"replication_words\":{repl},\"imbalance\":{},\"work_imbalance\":{}}}", g.nnz(), plan.imbalance(), plan.work_imbalance());
    drop(g);
    if only_spgemm {
        return;
    }
    // Sparse MTTKRP at density 1e-3; sparse.sh times the dense MTTKRP of the same shape.
    let (ni, rr) = (256usize, 32usize);
    let x = gen::uniform::<f64>(&[ni, ni, ni], 1e-3, 6).unwrap();
    let fs: Vec<Vec<f64>> = (0..3).map(|m| dense(ni * rr, 8 + m as u64)).collect();
    let (t1, _) = mttkrp_time(&x, &fs, rr, 1, reps);
    let (t2, plan) = mttkrp_time(&x, &fs, rr, 2, reps);
    let repl: u64 = (0..2).map(|r| plan.replication_words(r)).sum();
    let halo: u64 = (0..2).map(|r| plan.received_words(r)).sum();
    println!(
        "{{\"kernel\":\"mttkrp\",\"shape\":[{ni},{ni},{ni}],\"r\":{rr},\"nnz\":{},\"p1\":{t1},\"p2\":{t2},\"halo_words\":{halo},\"replication_words\":{repl},\"imbalance\":{}}}",
        x.nnz(),
        plan.imbalance()
    );
}
