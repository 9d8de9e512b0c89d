//! `--gemm blas`: distributed equals serial with the GEMMs run by the system CBLAS, for the
//! four element types, fused and unfused, on one thread and two per rank; without the cargo
//! feature, a run asking for it fails with a typed error before any step.

mod support;
use deinsum_exec::gemm::{blas_calls, Gemm};
use deinsum_exec::reference::{max_error, naive_seeded_as};
use deinsum_exec::scalar::Complex64;
use deinsum_exec::{ExecOptions, Scalar};
use support::*;

/// The einsums: a matmul, a chain, MTTKRP, a batched product, a coupled-cluster contraction
/// (GEMMs with transposed operands among them), extents not divisible by the ranks.
fn cases() -> Vec<deinsum_expr::ParsedEinsum> {
    vec![
        einsum("ij,jk->ik", &[('i', 67), ('j', 45), ('k', 53)]),
        einsum(
            "ij,jk,kl->il",
            &[('i', 39), ('j', 43), ('k', 30), ('l', 41)],
        ),
        einsum(
            "ijk,ja,ka->ia",
            &[('i', 29), ('j', 21), ('k', 17), ('a', 5)],
        ),
        einsum("bij,bjk->bik", &[('b', 5), ('i', 29), ('j', 27), ('k', 25)]),
        einsum(
            "abij,cdab->cdij",
            &[('a', 5), ('b', 4), ('c', 7), ('d', 6), ('i', 7), ('j', 9)],
        ),
    ]
}

/// Runs every case in `T` with the GEMMs on `gemm` at P in `procs`, against the serial
/// reference in the f64 or complex f64 of its seeded inputs (`tol` relative), with the words
/// moved equal to the plan's.
fn check_all<T: Scalar>(gemm: Gemm, procs: &[usize], tol: f64) {
    for e in &cases() {
        let t = left_tree(e);
        let want = if T::DTYPE.is_complex() {
            naive_seeded_as::<Complex64>(e, 3)
        } else {
            naive_seeded_as::<f64>(e, 3)
                .into_iter()
                .map(|x| Complex64::new(x, 0.0))
                .collect()
        };
        for &p in procs {
            for (threads, fusion) in [(1, unfused(&t)), (2, fused(&t))] {
                let pl = plan(e, &t, &fusion, p);
                let opts = ExecOptions {
                    gemm,
                    threads,
                    ..ExecOptions::default()
                };
                let (got, reps) = run_with::<T>(&pl, 3, &opts);
                let (abs, rel) = max_error(&got, &want);
                assert!(
                    rel < tol,
                    "{} P={p} threads={threads} {}: abs {abs}, rel {rel}",
                    pl.expression,
                    T::DTYPE
                );
                assert_volume(&pl, &reps);
            }
        }
    }
}

#[cfg(feature = "blas-external")]
mod with_blas {
    use super::*;
    use deinsum_exec::scalar::Complex32;

    const PROCS: [usize; 6] = [1, 2, 3, 5, 7, 16];

    /// Each element type through CBLAS; the count of CBLAS calls grows (the choice reached
    /// the kernels, on the ranks' threads and their pools' workers).
    #[test]
    fn f64_distributed_equals_serial() {
        let before = blas_calls();
        check_all::<f64>(Gemm::Blas, &PROCS, 1e-12);
        assert!(blas_calls() > before);
    }

    #[test]
    fn f32_distributed_equals_serial() {
        check_all::<f32>(Gemm::Blas, &PROCS, 1e-4);
    }

    #[test]
    fn c128_distributed_equals_serial() {
        let before = blas_calls();
        check_all::<Complex64>(Gemm::Blas, &PROCS, 1e-12);
        assert!(blas_calls() > before);
    }

    #[test]
    fn c64_distributed_equals_serial() {
        check_all::<Complex32>(Gemm::Blas, &PROCS, 1e-4);
    }

    /// A two-thread rank's GEMM large enough to be split runs its pieces on the pool's
    /// workers: each piece goes to CBLAS, and the product equals faer's.
    #[test]
    fn split_pieces_on_pool_workers_use_blas() {
        let e = einsum("ij,jk->ik", &[('i', 300), ('j', 200), ('k', 250)]);
        let t = left_tree(&e);
        let pl = plan(&e, &t, &unfused(&t), 1);
        let run = |gemm| {
            let opts = ExecOptions {
                gemm,
                threads: 2,
                ..ExecOptions::default()
            };
            run_with::<f64>(&pl, 9, &opts).0
        };
        let faer = run(Gemm::Faer);
        let before = blas_calls();
        let blas = run(Gemm::Blas);
        // Split in two halves at least (other tests may add calls meanwhile).
        assert!(blas_calls() >= before + 2);
        let (_, rel) = max_error(&blas, &faer);
        assert!(rel < 1e-13, "rel {rel}");
    }
}

/// Without the feature: the run is refused with the typed error naming the feature.
#[cfg(not(feature = "blas-external"))]
#[test]
fn blas_refused_without_the_feature() {
    let e = &cases()[0];
    let t = left_tree(e);
    let pl = plan(e, &t, &unfused(&t), 2);
    let opts = ExecOptions {
        gemm: Gemm::Blas,
        ..ExecOptions::default()
    };
    let world = deinsum_exec::InProcess::new(2).unwrap();
    let err = world
        .run(|comm| {
            deinsum_exec::execute_measured::<f64, _>(
                &pl,
                comm,
                &deinsum_exec::Inputs::Seeded { seed: 1 },
                &opts,
            )
            .map(|_| ())
        })
        .expect_err("refused");
    assert!(err.to_string().contains("cargo feature `blas`"), "{err}");
    assert_eq!(blas_calls(), 0);
}

/// faer stays the default, and gives the same figures through this file's checks.
#[test]
fn faer_default_distributed_equals_serial() {
    assert_eq!(ExecOptions::default().gemm, Gemm::Faer);
    check_all::<Complex64>(Gemm::Faer, &[1, 3, 7], 1e-12);
}
