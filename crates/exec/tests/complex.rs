//! Complex element types (c128, c64): distributed equals serial for P = 1..16 (primes,
//! non-divisible extents) through every kind of step the executor has for them: unfused and
//! fused groups (GEMMs, transposes, sums over an index), budget-phased and overlapped computes,
//! with the measured words equal to the plan's on every rank and step.

mod support;
use deinsum_exec::reference::{max_error, naive_seeded, naive_seeded_as};
use deinsum_exec::scalar::{Complex32, Complex64};
use deinsum_exec::{ExecOptions, Scalar};
use deinsum_plan::overlap::{is_pipelined, pipeline, Chunking};
use deinsum_plan::{build, Plan, PlanOptions};
use support::*;

/// Runs `pl` in `T` and checks it against the serial complex f64 reference (`tol` relative)
/// and the plan's words; returns the gathered output.
fn check_complex<T: Scalar>(e: &deinsum_expr::ParsedEinsum, pl: &Plan, tol: f64) -> Vec<T> {
    let (got, reps) = run::<T>(pl, 5, ExecOptions::default().tile_words);
    let want = naive_seeded_as::<Complex64>(e, 5);
    assert_eq!(got.len(), want.len());
    let (abs, rel) = max_error(&got, &want);
    assert!(
        rel < tol,
        "{} P={}: max abs {abs}, rel {rel}",
        pl.expression,
        pl.procs
    );
    assert_volume(pl, &reps);
    got
}

/// The einsums of these tests: a matmul, a chain, MTTKRP, a batched product, a transpose
/// with a sum over an index, and a contraction of a tensor network's shape.
fn cases() -> Vec<deinsum_expr::ParsedEinsum> {
    vec![
        einsum("ij,jk->ik", &[('i', 13), ('j', 11), ('k', 7)]),
        einsum("ij,jk,kl->il", &[('i', 9), ('j', 13), ('k', 10), ('l', 11)]),
        einsum("ijk,ja,ka->ia", &[('i', 9), ('j', 11), ('k', 7), ('a', 5)]),
        einsum("bij,bjk->bik", &[('b', 5), ('i', 9), ('j', 7), ('k', 5)]),
        einsum("ijk->kj", &[('i', 7), ('j', 5), ('k', 11)]),
        einsum(
            "abij,cdab->cdij",
            &[('a', 5), ('b', 4), ('c', 3), ('d', 6), ('i', 7), ('j', 3)],
        ),
    ]
}

#[test]
fn c128_unfused_and_fused_every_p() {
    for e in &cases() {
        let t = left_tree(e);
        for p in 1..=16 {
            let fusion = if p % 2 == 0 { fused(&t) } else { unfused(&t) };
            check_complex::<Complex64>(e, &plan(e, &t, &fusion, p), 1e-12);
        }
    }
}

#[test]
fn c64_every_p_within_single_precision() {
    for e in &cases() {
        let t = left_tree(e);
        for p in 1..=16 {
            let fusion = if p % 2 == 1 { fused(&t) } else { unfused(&t) };
            check_complex::<Complex32>(e, &plan(e, &t, &fusion, p), 1e-5);
        }
    }
}

/// The real parts of complex seeded inputs are the real run's inputs, and their imaginary
/// parts are not zero: the complex product differs from the real one.
#[test]
fn complex_inputs_have_both_parts() {
    let e = einsum("ij,jk->ik", &[('i', 6), ('j', 5), ('k', 4)]);
    let t = left_tree(&e);
    let pl = plan(&e, &t, &unfused(&t), 3);
    let (z, _) = run::<Complex64>(&pl, 5, 1 << 16);
    let (x, _) = run::<f64>(&pl, 5, 1 << 16);
    let (_, rel_real) = max_error(&x, &naive_seeded(&e, 5));
    assert!(rel_real < 1e-12);
    assert!(
        z.iter().any(|v| v.im.abs() > 1e-3),
        "imaginary parts all zero"
    );
    let (_, rel) = max_error(&z, &x);
    assert!(rel > 1e-3, "complex product equals the real one: {rel}");
    let d = deinsum_exec::data::seeded::<Complex64>(5, 0, 3);
    assert_eq!(d.re, deinsum_exec::data::seeded_value(5, 0, 3));
    assert_ne!(d.im, 0.0);
}

/// Budget-phased plans (a summed index walked in phases) in c128.
#[test]
fn c128_in_phases() {
    let e = einsum("ij,jk->ik", &[('i', 23), ('j', 29), ('k', 19)]);
    let mut ran = 0;
    for p in [2, 3, 4, 5, 7, 8, 9, 12, 16] {
        let opts = |mem| PlanOptions {
            procs: p,
            mem,
            objective: deinsum_plan::Objective::Flops,
            ..Default::default()
        };
        let free = build(&e, &opts(None)).unwrap();
        for frac in [0.9, 0.75, 0.6, 0.45] {
            let s = (free.prediction.max_peak_memory as f64 * frac) as u64;
            let Ok(pl) = build(&e, &opts(Some(s))) else {
                continue;
            };
            if pl.groups.iter().all(|g| g.phases.is_none()) {
                continue;
            }
            check_complex::<Complex64>(&e, &pl, 1e-12);
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} phased complex plans ran");
}

/// Overlapped plans (each phase's next windows in flight while it computes) in c128.
#[test]
fn c128_overlapped_every_p() {
    const EAGER: Chunking = Chunking {
        max_chunks: 3,
        min_phase_extent: 1,
        min_phase_words: 1,
    };
    let e = einsum(
        "ij,jk,kl->il",
        &[('i', 13), ('j', 17), ('k', 11), ('l', 14)],
    );
    let mut ran = 0;
    for p in 1..=16 {
        let o = PlanOptions {
            procs: p,
            overlap: false,
            ..Default::default()
        };
        let pl = pipeline(build(&e, &o).unwrap(), &o, &EAGER);
        if (0..pl.groups.len()).any(|g| is_pipelined(&pl, g)) {
            check_complex::<Complex64>(&e, &pl, 1e-12);
            ran += 1;
        }
    }
    assert!(ran >= 10, "only {ran} overlapped complex plans ran");
}
