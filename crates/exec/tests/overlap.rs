//! Overlapped plans (double buffering): each phase's windows for the next phase are in flight
//! while it computes. Distributed equals serial for P = 1..16 (primes, non-divisible
//! extents), the measured words equal the plan on every rank and step (the prefetched words
//! counted in the step that plans them), and no rank holds more than the predicted peak with
//! the second buffer, nor the budget.

mod support;
use deinsum_exec::reference::{max_error, naive_seeded};
use deinsum_exec::ExecOptions;
use deinsum_plan::overlap::{is_pipelined, pipeline, Chunking};
use deinsum_plan::{build, Plan, PlanOptions};
use support::*;

/// Pipelines every group with a move, however small (the default rule skips small ones).
const EAGER: Chunking = Chunking {
    max_chunks: 3,
    min_phase_extent: 1,
    min_phase_words: 1,
};

fn opts(p: usize, mem: Option<u64>) -> PlanOptions {
    PlanOptions {
        procs: p,
        mem,
        overlap: false,
        ..Default::default()
    }
}

/// Runs `pl` and checks it against the serial reference, the predicted words and peaks.
fn check_run(e: &deinsum_expr::ParsedEinsum, pl: &Plan, what: &str) {
    let (got, reps) = run::<f64>(pl, 11, ExecOptions::default().tile_words);
    let want = naive_seeded(e, 11);
    let (abs, rel) = max_error(&got, &want);
    assert!(rel < 1e-12, "{what}: max abs {abs}, rel {rel}");
    assert_volume(pl, &reps);
    assert_memory(pl, &reps);
    if let Some(s) = pl.mem {
        for r in &reps {
            assert!(
                r.peak_words <= s,
                "{what}: rank {} held {}",
                r.rank,
                r.peak_words
            );
        }
    }
}

fn pipelined(pl: &Plan) -> bool {
    (0..pl.groups.len()).any(|g| is_pipelined(pl, g))
}

/// Plans `e` without overlap on 1..=16 ranks, pipelines it eagerly and runs what changed;
/// returns how many pipelined plans ran.
fn overlapped_runs(e: &deinsum_expr::ParsedEinsum) -> usize {
    let mut ran = 0;
    for p in 1..=16 {
        let o = opts(p, None);
        let pl = pipeline(build(e, &o).unwrap(), &o, &EAGER);
        if !pipelined(&pl) {
            continue;
        }
        check_run(e, &pl, &format!("{} P={p}", pl.expression));
        ran += 1;
    }
    ran
}

#[test]
fn matmul_overlapped_every_p() {
    let e = einsum("ij,jk->ik", &[('i', 23), ('j', 29), ('k', 19)]);
    let n = overlapped_runs(&e);
    assert!(n >= 12, "only {n} overlapped matmul plans ran");
}

#[test]
fn chains_overlapped_every_p() {
    let e = einsum(
        "ij,jk,kl->il",
        &[('i', 13), ('j', 17), ('k', 11), ('l', 14)],
    );
    let n2 = overlapped_runs(&e);
    let e = einsum(
        "ij,jk,kl,lm->im",
        &[('i', 9), ('j', 13), ('k', 10), ('l', 11), ('m', 7)],
    );
    let n3 = overlapped_runs(&e);
    assert!(n2 >= 10 && n3 >= 10, "only {n2} 2MM and {n3} 3MM plans ran");
}

#[test]
fn mttkrp_overlapped_every_p() {
    let e = einsum("ijk,ja,ka->ia", &[('i', 9), ('j', 11), ('k', 7), ('a', 5)]);
    let n = overlapped_runs(&e);
    assert!(n >= 8, "only {n} overlapped mttkrp plans ran");
}

/// Budget-phased plans of `e` whose phases prefetch, run; returns how many.
fn budget_runs(e: &deinsum_expr::ParsedEinsum) -> usize {
    let mut ran = 0;
    for p in [2, 3, 4, 5, 7, 8, 9, 12, 16] {
        let free = build(e, &opts(p, None)).unwrap();
        for frac in [0.95, 0.9, 0.85, 0.8, 0.75, 0.6] {
            let s = (free.prediction.max_peak_memory as f64 * frac) as u64;
            let o = opts(p, Some(s));
            let Ok(plain) = build(e, &o) else { continue };
            let pl = pipeline(plain, &o, &EAGER);
            let budget_phased = pl.groups.iter().enumerate().any(|(g, gp)| {
                gp.phases.as_ref().is_some_and(|ph| !ph.overlap) && is_pipelined(&pl, g)
            });
            if !budget_phased {
                continue;
            }
            assert!(pl.prediction.max_peak_memory <= s);
            check_run(e, &pl, &format!("{} P={p} S={s}", pl.expression));
            ran += 1;
        }
    }
    ran
}

#[test]
fn budget_phased_plans_prefetch() {
    let mm = budget_runs(&einsum("ij,jk->ik", &[('i', 23), ('j', 29), ('k', 19)]));
    let big = budget_runs(&einsum("ij,jk->ik", &[('i', 64), ('j', 96), ('k', 40)]));
    let mttkrp = budget_runs(&einsum(
        "ijk,ja,ka->ia",
        &[('i', 9), ('j', 11), ('k', 7), ('a', 5)],
    ));
    println!("prefetching budget plans: {mm} + {big} matmul, {mttkrp} mttkrp");
    assert!(
        mm + big >= 2,
        "only {} budget-phased matmul plans prefetched",
        mm + big
    );
}

#[test]
fn default_plans_run_with_and_without_overlap() {
    // Large enough for the default rule to pipeline the matmul on 2 and 3 ranks.
    let e = einsum("ij,jk->ik", &[('i', 200), ('j', 2100), ('k', 210)]);
    for p in [2, 3] {
        let on = build(
            &e,
            &PlanOptions {
                procs: p,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            pipelined(&on),
            "P={p}: the default rule pipelines this matmul"
        );
        check_run(&e, &on, &format!("default P={p}"));
        let off = build(&e, &opts(p, None)).unwrap();
        assert!(!pipelined(&off));
        check_run(&e, &off, &format!("--no-overlap P={p}"));
    }
}
