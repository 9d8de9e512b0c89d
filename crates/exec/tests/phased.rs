//! Phased computes (the 2.5D scheme): under a memory budget below what whole blocks need, a
//! group walks a summed index in phases. Distributed equals serial, the measured words equal
//! the plan on every rank and step, and no rank exceeds the predicted peak or the budget.

mod support;
use deinsum_exec::reference::{max_error, naive_seeded};
use deinsum_exec::ExecOptions;
use deinsum_plan::{build, PlanOptions};
use support::*;

/// Plans `e` on `p` ranks under budgets shrinking from the unlimited plan's peak, runs every
/// plan that fits and is phased, and returns how many such plans ran.
fn phased_runs(e: &deinsum_expr::ParsedEinsum, p: usize) -> usize {
    let free = build(
        e,
        &PlanOptions {
            procs: p,
            // The path search's tree: these cases are chosen for the phasing of its groups.
            objective: deinsum_plan::Objective::Flops,
            ..Default::default()
        },
    )
    .expect("plans without a budget");
    let mut ran = 0;
    for frac in [0.9, 0.75, 0.6, 0.45] {
        let s = (free.prediction.max_peak_memory as f64 * frac) as u64;
        let Ok(pl) = build(
            e,
            &PlanOptions {
                procs: p,
                mem: Some(s),
                objective: deinsum_plan::Objective::Flops,
                ..Default::default()
            },
        ) else {
            continue;
        };
        if pl.groups.iter().all(|g| g.phases.is_none()) {
            continue;
        }
        assert!(
            pl.prediction.max_peak_memory <= s,
            "P={p} S={s}: predicted peak over budget"
        );
        let (got, reps) = run::<f64>(&pl, 7, ExecOptions::default().tile_words);
        let want = naive_seeded(e, 7);
        let (abs, rel) = max_error(&got, &want);
        assert!(rel < 1e-12, "P={p} S={s}: max abs {abs}, rel {rel}");
        assert_volume(&pl, &reps);
        assert_memory(&pl, &reps);
        for r in &reps {
            assert!(
                r.peak_words <= s,
                "P={p} S={s}: rank {} held {}",
                r.rank,
                r.peak_words
            );
        }
        let back: deinsum_plan::Plan =
            serde_json::from_str(&serde_json::to_string(&pl).unwrap()).unwrap();
        assert_eq!(back, pl, "phased plan JSON round-trips");
        ran += 1;
    }
    ran
}

#[test]
fn matmul_in_phases_every_p() {
    // Non-divisible extents; primes among the P.
    let e = einsum("ij,jk->ik", &[('i', 23), ('j', 29), ('k', 19)]);
    let mut total = 0;
    for p in [2, 3, 4, 5, 7, 8, 9, 12, 16, 27] {
        total += phased_runs(&e, p);
    }
    println!("{total} phased matmul plans ran");
    assert!(total >= 10, "only {total} phased plans ran");
}

#[test]
fn mttkrp_and_chain_in_phases() {
    let e = einsum("ijk,ja,ka->ia", &[('i', 9), ('j', 11), ('k', 7), ('a', 5)]);
    let mut total = 0;
    for p in [2, 3, 4, 6, 8] {
        total += phased_runs(&e, p);
    }
    let e = einsum(
        "ij,jk,kl->il",
        &[('i', 13), ('j', 17), ('k', 11), ('l', 14)],
    );
    for p in [3, 4, 8] {
        total += phased_runs(&e, p);
    }
    println!("{total} phased mttkrp/chain plans ran");
    assert!(total >= 4, "only {total} phased plans ran");
}
