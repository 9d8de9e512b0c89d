//! The overlap post-pass: pipelined groups prefetch the next phase's windows. Every window's
//! derived transfers are an exact cover of it, the words of a plan do not change when it is
//! pipelined (only which step moves them), the peak counts the second buffer and stays
//! within the budget, and a plan built without overlap is the plan the pass started from.

use deinsum_expr::{parse, ExtentSpec, ParsedEinsum};
use deinsum_plan::overlap::{is_pipelined, pipeline, Chunking};
use deinsum_plan::{build, Fetch, Plan, PlanOptions, PlanStep, Window};
use std::collections::BTreeSet;

fn einsum(expr: &str, sizes: &str) -> ParsedEinsum {
    parse(
        expr,
        &ExtentSpec::from_flags(Some(sizes), None, None).unwrap(),
    )
    .unwrap()
}

/// Pipelines any group with a move, however small (the default rule skips small ones).
const EAGER: Chunking = Chunking {
    max_chunks: 3,
    min_phase_extent: 1,
    min_phase_words: 1,
};

fn no_overlap(procs: usize, mem: Option<u64>) -> PlanOptions {
    PlanOptions {
        procs,
        mem,
        overlap: false,
        ..Default::default()
    }
}

/// The kernels of the tests, with non-divisible extents.
fn kernels() -> Vec<ParsedEinsum> {
    vec![
        einsum("ij,jk->ik", "i=23,j=29,k=19"),
        einsum("ij,jk,kl->il", "i=13,j=17,k=11,l=14"),
        einsum("ij,jk,kl,lm->im", "i=9,j=13,k=10,l=11,m=7"),
        einsum("ijk,ja,ka->ia", "i=9,j=11,k=7,a=5"),
    ]
}

/// Every element of a box of `ranges`, as global coordinates.
fn elements(ranges: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for &(s, e) in ranges {
        out = out
            .into_iter()
            .flat_map(|p| {
                (s..e).map(move |x| {
                    let mut q = p.clone();
                    q.push(x);
                    q
                })
            })
            .collect();
    }
    out
}

fn inside(x: &[usize], ranges: &[(usize, usize)]) -> bool {
    x.iter().zip(ranges).all(|(&v, &(s, e))| s <= v && v < e)
}

/// Checks that move `j` of step `i` (the fetch `f`) delivers every element of every rank's
/// window exactly once, from a rank whose resting block holds it, and that sender and
/// receiver derive the same message.
fn check_window_cover(plan: &Plan, i: usize, j: usize, f: &Fetch) {
    let shape = &plan.tensor(f.tensor).unwrap().shape;
    let lists: Vec<_> = (0..plan.procs)
        .map(|r| plan.step_transfers(i, r).swap_remove(j))
        .collect();
    for r in 0..plan.procs {
        let want: BTreeSet<Vec<usize>> =
            f.to.block(r, shape)
                .map(|b| elements(&b.ranges).into_iter().collect())
                .unwrap_or_default();
        let mut got = BTreeSet::new();
        for t in lists[r].iter().filter(|t| t.dst == r) {
            let src = f
                .from
                .block(t.src, shape)
                .expect("the sender holds a block");
            if t.src != r {
                assert!(
                    lists[t.src].contains(t),
                    "step {i}: rank {} does not derive its message to {r}",
                    t.src
                );
            }
            for b in &t.boxes {
                for x in elements(&b.ranges) {
                    assert!(
                        inside(&x, &src.ranges),
                        "step {i}: {x:?} not held by {}",
                        t.src
                    );
                    assert!(
                        got.insert(x.clone()),
                        "step {i}: {x:?} received twice by {r}"
                    );
                }
            }
        }
        assert_eq!(
            got, want,
            "step {i}, move {j}: rank {r}'s window not covered"
        );
    }
}

/// The structure of every pipelined group: phase 0 fetches, each phase prefetches the next
/// one's windows, the last prefetches nothing; each window is the phase's part of the
/// group's distribution; every window is an exact cover; step volumes add up.
fn check_pipelined(plan: &Plan) {
    for (gi, g) in plan.groups.iter().enumerate() {
        if !is_pipelined(plan, gi) {
            continue;
        }
        let ph = g.phases.as_ref().expect("a pipelined group is phased");
        let steps: Vec<(usize, &PlanStep)> = plan
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, PlanStep::ComputePhase { group, .. } if *group == gi))
            .collect();
        assert_eq!(steps.len(), ph.count);
        for (t, &(i, s)) in steps.iter().enumerate() {
            let PlanStep::ComputePhase {
                phase,
                fetch,
                prefetch,
                volume,
                ..
            } = s
            else {
                unreachable!()
            };
            assert_eq!(*phase, t);
            assert_eq!(fetch.is_empty(), t > 0, "group {gi} phase {t}: fetch");
            assert_eq!(
                prefetch.is_empty(),
                t + 1 == ph.count,
                "group {gi} phase {t}"
            );
            for (f, part) in fetch
                .iter()
                .map(|f| (f, t))
                .chain(prefetch.iter().map(|f| (f, t + 1)))
            {
                let (_, whole) = g.inputs.iter().find(|(id, _)| *id == f.tensor).unwrap();
                let dim = plan
                    .tensor(f.tensor)
                    .unwrap()
                    .indices
                    .iter()
                    .position(|&c| c == ph.index);
                let mut expect = whole.clone();
                expect.window = vec![Window {
                    dim: dim.expect("a window holds the phased index"),
                    parts: ph.count,
                    part,
                }];
                assert_eq!(f.to, expect, "group {gi} phase {t}: window");
            }
            for (j, f) in fetch.iter().chain(prefetch).enumerate() {
                check_window_cover(plan, i, j, f);
            }
            let (mut max, mut total) = (0, 0);
            for r in 0..plan.procs {
                let (_, w) = plan.step_words(i, r);
                max = max.max(w);
                total += w;
            }
            assert_eq!(
                (volume.max_per_rank, volume.total),
                (max, total),
                "step {i}"
            );
        }
    }
}

#[test]
fn pipelined_plans_cover_their_windows_and_keep_their_words() {
    let mut pipelined = 0;
    for e in kernels() {
        for p in 1..=16 {
            let opts = no_overlap(p, None);
            let plain = build(&e, &opts).unwrap();
            let piped = pipeline(plain.clone(), &opts, &EAGER);
            let any = (0..piped.groups.len()).any(|g| is_pipelined(&piped, g));
            if !any {
                assert_eq!(piped, plain, "nothing pipelined, yet the plan changed");
                continue;
            }
            pipelined += 1;
            check_pipelined(&piped);
            // Pipelining moves the same words, only in other steps.
            let (a, b) = (&plain.prediction, &piped.prediction);
            assert_eq!(
                (a.max_per_rank, a.total, a.max_sent_per_rank),
                (b.max_per_rank, b.total, b.max_sent_per_rank),
                "{} P={p}: words changed",
                plain.expression
            );
            for r in 0..p {
                let peak = piped.peak_of(r).0;
                assert!(peak <= b.max_peak_memory, "P={p} rank {r}");
            }
            let text = serde_json::to_string(&piped).unwrap();
            assert!(text.contains("\"prefetch\""));
            assert_eq!(Plan::from_json(&text).unwrap(), piped, "JSON round trip");
        }
    }
    println!("{pipelined} pipelined plans");
    assert!(pipelined >= 40, "only {pipelined} plans were pipelined");
}

#[test]
fn budget_phased_groups_prefetch_within_the_budget() {
    let mut prefetching = 0;
    for e in kernels() {
        for p in [2, 3, 4, 5, 7, 8, 9, 12, 16] {
            let free = build(&e, &no_overlap(p, None)).unwrap();
            for frac in [0.95, 0.85, 0.75, 0.6] {
                let s = (free.prediction.max_peak_memory as f64 * frac) as u64;
                let opts = no_overlap(p, Some(s));
                let Ok(plain) = build(&e, &opts) else {
                    continue;
                };
                let piped = pipeline(plain.clone(), &opts, &EAGER);
                assert!(piped.prediction.max_peak_memory <= s, "P={p} S={s}");
                let phased: Vec<usize> = (0..piped.groups.len())
                    .filter(|&g| piped.groups[g].phases.is_some())
                    .collect();
                if !phased.iter().any(|&g| is_pipelined(&piped, g)) {
                    continue;
                }
                prefetching += 1;
                check_pipelined(&piped);
                // Pipelining moves the same words (a recut group's windows cover the same).
                assert_eq!(
                    piped.prediction.total, plain.prediction.total,
                    "P={p} S={s}"
                );
            }
        }
    }
    println!("{prefetching} budget plans with prefetches");
    assert!(prefetching >= 5, "only {prefetching} budget plans prefetch");
}

#[test]
fn without_overlap_the_plan_is_the_one_the_pass_starts_from() {
    for e in kernels() {
        for p in [1, 2, 3, 7, 16] {
            let plain = build(&e, &no_overlap(p, None)).unwrap();
            let text = serde_json::to_string_pretty(&plain).unwrap();
            assert!(
                !text.contains("prefetch"),
                "no-overlap plans carry no prefetch"
            );
            let with = build(
                &e,
                &PlanOptions {
                    procs: p,
                    ..Default::default()
                },
            )
            .unwrap();
            // The default rule skips these small groups: the default plan is the same.
            assert_eq!(serde_json::to_string_pretty(&with).unwrap(), text);
        }
    }
}

#[test]
fn large_matmul_is_pipelined_by_default_and_deterministically() {
    let e = einsum("ij,jk->ik", "i=2048,j=2048,k=2048");
    let opts = PlanOptions {
        procs: 2,
        ..Default::default()
    };
    let a = build(&e, &opts).unwrap();
    let b = build(&e, &opts).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let plain = build(&e, &no_overlap(2, None)).unwrap();
    assert!(is_pipelined(&a, 0), "MM 2048 on 2 ranks is pipelined");
    let ph = a.groups[0].phases.as_ref().unwrap();
    assert_eq!(ph.count, Chunking::DEFAULT.max_chunks);
    assert_eq!(a.prediction.total, plain.prediction.total);
    assert!(
        !a.steps
            .iter()
            .any(|s| matches!(s, PlanStep::Redistribute { volume, .. } if volume.total > 0)),
        "the move into the group is replaced by the phases' fetches"
    );
    check_pipelined_small_sample(&a);
}

#[test]
fn overlap_is_left_out_where_no_core_is_free_to_move_the_words() {
    let e = einsum("ij,jk->ik", "i=2048,j=2048,k=2048");
    // Two ranks filling a two-core node (this host): no core is left to make the copies.
    let full = deinsum_plan::Machine::default().on_host(2, 2);
    assert!(!full.copies_hide(2));
    let on = |machine: deinsum_plan::Machine| PlanOptions {
        procs: 2,
        machine,
        ..Default::default()
    };
    let a = build(&e, &on(full.clone())).unwrap();
    let plain = build(
        &e,
        &PlanOptions {
            overlap: false,
            ..on(full)
        },
    )
    .unwrap();
    assert!(!is_pipelined(&a, 0), "a full node gets the plain plan");
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&plain).unwrap()
    );
    // A spare core (two ranks on four cores), or a job spanning nodes, does overlap.
    let spare = deinsum_plan::Machine::default().on_host(4, 2);
    assert!(spare.copies_hide(2));
    assert!(is_pipelined(&build(&e, &on(spare)).unwrap(), 0));
    let spans = deinsum_plan::Machine::default().on_host(1, 1);
    assert!(spans.copies_hide(2));
    assert!(!spans.copies_hide(1));
}

/// The structural part of [`check_pipelined`] without the element-wise cover (too large).
fn check_pipelined_small_sample(plan: &Plan) {
    for (i, s) in plan.steps.iter().enumerate() {
        if let PlanStep::ComputePhase { volume, .. } = s {
            let total: u64 = (0..plan.procs).map(|r| plan.step_words(i, r).1).sum();
            assert_eq!(volume.total, total);
        }
    }
}
