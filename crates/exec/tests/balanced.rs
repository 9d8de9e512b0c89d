//! Canonical inputs in balanced blocks: extents that the ranks do not divide (10 over 8, and
//! primes 7, 11, 13) put data on every rank of the canonical grid, and distributed runs equal
//! the serial result with measured words equal to the prediction on every rank and step.

mod support;
use deinsum_exec::reference::{max_error, naive_seeded};
use deinsum_plan::{build, canonical_distribution, Plan, PlanOptions, PlanStep};
use support::*;

/// Plans `e` on `p` ranks with the planner's own path and fusion.
fn plan_auto(e: &deinsum_expr::ParsedEinsum, p: usize) -> Plan {
    build(
        e,
        &PlanOptions {
            procs: p,
            ..Default::default()
        },
    )
    .expect("plans")
}

/// Runs `pl` against the serial reference, checks the volumes and peaks, and returns the
/// number of ranks its loads put data on (the largest over the inputs).
fn run_checked(e: &deinsum_expr::ParsedEinsum, pl: &Plan) -> usize {
    let (got, reps) = run::<f64>(pl, 11, 1 << 16);
    let (abs, rel) = max_error(&got, &naive_seeded(e, 11));
    assert!(rel < 1e-12, "P={}: max abs {abs}, rel {rel}", pl.procs);
    assert_volume(pl, &reps);
    assert_memory(pl, &reps);
    let mut most = 0;
    for s in &pl.steps {
        if let PlanStep::Load { tensor, dist } = s {
            let t = pl.tensor(*tensor).expect("input");
            assert_eq!(
                dist,
                &canonical_distribution(&t.indices, &t.shape, pl.procs)
            );
            let holders = (0..pl.procs)
                .filter(|&r| dist.block(r, &t.shape).is_some_and(|b| !b.is_empty()))
                .count();
            // Every rank of the canonical grid holds data.
            assert_eq!(
                holders,
                dist.grid.size(),
                "tensor {tensor} on P={}",
                pl.procs
            );
            most = most.max(holders);
        }
    }
    most
}

#[test]
fn ten_extents_over_eight_ranks_load_on_every_rank() {
    // 10 x 64 (640 words) is cut into 8 row blocks of 2 and 1 rows (ceil blocks of 2 rows
    // would fill 5 ranks).
    let e = einsum("ij,jk->ik", &[('i', 10), ('j', 64), ('k', 10)]);
    let pl = plan_auto(&e, 8);
    assert_eq!(run_checked(&e, &pl), 8);
    let load = pl.steps.iter().find_map(|s| match s {
        PlanStep::Load { tensor: 0, dist } => Some(dist.clone()),
        _ => None,
    });
    let d = load.expect("T0 is loaded");
    assert!(d.balanced);
    let rows: Vec<usize> = (0..8)
        .map(|r| d.block(r, &[10, 64]).unwrap().shape()[0])
        .collect();
    assert_eq!(rows, [2, 2, 1, 1, 1, 1, 1, 1]);
    // Every input and intermediate of 10-extents, fused and unfused.
    for e in [
        einsum("ij,jk->ik", &[('i', 10), ('j', 10), ('k', 10)]),
        einsum(
            "ijk,ja,ka->ia",
            &[('i', 10), ('j', 10), ('k', 10), ('a', 10)],
        ),
        einsum(
            "ijk,ja,ka,al->il",
            &[('i', 10), ('j', 10), ('k', 10), ('a', 10), ('l', 10)],
        ),
    ] {
        let t = left_tree(&e);
        for fusion in [fused(&t), unfused(&t)] {
            run_checked(&e, &plan(&e, &t, &fusion, 8));
        }
        run_checked(&e, &plan_auto(&e, 8));
    }
}

#[test]
fn prime_ranks_with_uneven_extents() {
    let cases = [
        einsum("ij,jk->ik", &[('i', 23), ('j', 17), ('k', 19)]),
        einsum("ijk,ja,ka->ia", &[('i', 15), ('j', 10), ('k', 9), ('a', 6)]),
        einsum("bij,bjk->bik", &[('b', 14), ('i', 9), ('j', 8), ('k', 6)]),
    ];
    for e in &cases {
        let t = left_tree(e);
        for p in [7, 11, 13] {
            let pl = plan_auto(e, p);
            assert_eq!(run_checked(e, &pl), p, "{e:?} on P={p}: canonical ranks");
            for fusion in [fused(&t), unfused(&t)] {
                run_checked(e, &plan(e, &t, &fusion, p));
            }
        }
    }
}
