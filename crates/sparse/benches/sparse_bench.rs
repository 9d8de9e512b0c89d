//! The sparse kernels' bench driver (run by `benches/sparse.sh`, which times SciPy on the same
//! matrices in the same run): writes each generated matrix as `.npz` arrays for the Python
//! side, then prints one JSON line per measurement (median seconds over `--reps`).
//!
//! `cargo bench -p deinsum-sparse --bench sparse_bench -- --dir D [--scale 18] [--gemm-scale 16]
//! [--reps 5] [--k 16]`

use deinsum_exec::{Communicator, InProcess};
use deinsum_sparse::halo::{self, HaloPlan};
use deinsum_sparse::{gen, kernels, Csr, SparseError};
use ndarray::Array1;
use ndarray_npy::NpzWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn time<R>(reps: usize, mut f: impl FnMut() -> R) -> f64 {
    let _ = f();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
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

/// Median seconds of the halo SpMM on `procs` in-process ranks of one thread each (the
/// inspector — partition and localized columns — is built once, before timing), and the plan.
fn halo_time(a: &Csr<f64>, b: &[f64], k: usize, procs: usize, reps: usize) -> (f64, HaloPlan) {
    let plan = HaloPlan::build(a, k, procs).unwrap();
    let world = InProcess::new(procs).unwrap();
    let times = world
        .run(|comm| {
            let r = comm.rank();
            let a_local = a.rows(plan.a_cuts[r], plan.a_cuts[r + 1]);
            let local = halo::localize(&plan, r, &a_local)?;
            let b_local = &b[plan.b_cuts()[r] * k..plan.b_cuts()[r + 1] * k];
            // One thread per rank: P=2 means two ranks of one thread each.
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .map_err(|e| SparseError::Shape(e.to_string()))?;
            let mut ts = Vec::new();
            for rep in 0..=reps {
                comm.barrier()?;
                let t = Instant::now();
                let bx = halo::exchange_halo(comm, &plan, &a_local, b_local)?;
                let c = pool.install(|| kernels::spmm(&local, &bx, k))?;
                std::hint::black_box(c);
                let mut s = [t.elapsed().as_nanos() as u64];
                comm.all_reduce_max_u64(&mut s)?;
                if rep > 0 {
                    ts.push(s[0] as f64 * 1e-9);
                }
            }
            Ok::<_, SparseError>(median(ts))
        })
        .unwrap();
    (times[0], plan)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut dir, mut scale, mut gemm_scale, mut reps, mut k) =
        (PathBuf::from("."), 18u32, 16u32, 5usize, 16usize);
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("flag value");
        match a.as_str() {
            "--dir" => dir = PathBuf::from(val()),
            "--scale" => scale = val().parse().unwrap(),
            "--gemm-scale" => gemm_scale = val().parse().unwrap(),
            "--reps" => reps = val().parse().unwrap(),
            "--k" => k = val().parse().unwrap(),
            "--bench" => {}
            other => panic!("unknown flag {other}"),
        }
    }
    let pool1 = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let a = gen::rmat::<f64>(scale, 16, 1).unwrap().to_csr().unwrap();
    write_csr(&dir.join(format!("rmat{scale}.npz")), &a);
    let n = a.nrows;
    for (name, kk) in [("spmv", 1), ("spmm", k)] {
        let b = dense(n * kk, 2);
        let t1 = pool1.install(|| time(reps, || kernels::spmm(&a, &b, kk).unwrap()));
        let (t2, plan) = halo_time(&a, &b, kk, 2, reps);
        let repl: u64 = (0..2).map(|r| plan.replication_words(r)).sum();
        println!(
            "{{\"kernel\":\"{name}\",\"scale\":{scale},\"nnz\":{},\"k\":{kk},\"p1\":{t1},\"p2\":{t2},\"halo_words\":{},\"replication_words\":{repl},\"imbalance\":{}}}",
            a.nnz(),
            plan.total_received(),
            plan.imbalance()
        );
    }
    let r = 32;
    let (u, v) = (dense(n * r, 3), dense(n * r, 4));
    let t1 = pool1.install(|| time(reps, || kernels::sddmm(&a, &u, &v, r).unwrap()));
    let t2 = time(reps, || {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
            .install(|| kernels::sddmm(&a, &u, &v, r).unwrap())
    });
    println!(
        "{{\"kernel\":\"sddmm\",\"scale\":{scale},\"nnz\":{},\"k\":{r},\"p1\":{t1},\"p2\":{t2}}}",
        a.nnz()
    );
    let g = gen::rmat::<f64>(gemm_scale, 16, 5)
        .unwrap()
        .to_csr()
        .unwrap();
    write_csr(&dir.join(format!("rmat{gemm_scale}.npz")), &g);
    let t1 = pool1.install(|| time(reps.min(3), || kernels::spgemm(&g, &g).unwrap()));
    let pool2 = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let t2 = pool2.install(|| time(reps.min(3), || kernels::spgemm(&g, &g).unwrap()));
    let out_nnz = kernels::spgemm(&g, &g).unwrap().nnz();
    println!("{{\"kernel\":\"spgemm\",\"scale\":{gemm_scale},\"nnz\":{},\"out_nnz\":{out_nnz},\"p1\":{t1},\"p2\":{t2}}}", g.nnz());
    // Sparse MTTKRP at density 1e-3 against the dense product's flops-equivalent shape.
    let (ni, rr) = (256usize, 32usize);
    let x = gen::uniform::<f64>(&[ni, ni, ni], 1e-3, 6).unwrap();
    let (fj, fk) = (dense(ni * rr, 8), dense(ni * rr, 9));
    let t1 = pool1.install(|| {
        time(reps, || {
            kernels::mttkrp(&x, &[&[], &fj, &fk], 0, rr).unwrap()
        })
    });
    println!(
        "{{\"kernel\":\"mttkrp\",\"shape\":[{ni},{ni},{ni}],\"r\":{rr},\"nnz\":{},\"p1\":{t1}}}",
        x.nnz()
    );
}
