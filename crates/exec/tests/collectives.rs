//! Structured moves run as the collective of their kind on the sub-communicator of their grid
//! dims (the communicator counts calls per kind, so each step shows the path it took), give
//! the serial result and move exactly the predicted words on every rank and step.

mod support;
use deinsum_exec::reference::{max_error, naive_seeded};
use deinsum_exec::{Collective, RunReport};
use deinsum_plan::{
    build, Distribution, Grid, GridDim, MoveKind, MoveView, Plan, PlanOptions, PlanStep,
};
use std::collections::BTreeMap;
use support::*;

/// The kind of a step's moves, when it has moves and they are all of one kind.
fn kind_of(step: &PlanStep) -> Option<&MoveKind> {
    let ks: Vec<&MoveKind> = match step {
        PlanStep::Redistribute { pattern, .. } => vec![pattern],
        PlanStep::ComputePhase { fetch, .. } => fetch.iter().map(|f| &f.pattern).collect(),
        _ => Vec::new(),
    };
    let first = *ks.first()?;
    ks.iter()
        .all(|k| std::mem::discriminant(*k) == std::mem::discriminant(first))
        .then_some(first)
}

/// A kind's name and the collective its moves run as (`None`: no communication).
fn collective_of(k: &MoveKind) -> (&'static str, Option<Collective>) {
    match k {
        MoveKind::Local => ("local", None),
        MoveKind::AllGather { .. } => ("all_gather", Some(Collective::AllGather)),
        MoveKind::ReduceScatter { .. } => ("reduce_scatter", Some(Collective::ReduceScatter)),
        MoveKind::AllReduce { .. } => ("all_reduce", Some(Collective::AllReduce)),
        MoveKind::Reduce => ("reduce", Some(Collective::Reduce)),
        MoveKind::Gather => ("gather", Some(Collective::Gather)),
        MoveKind::Broadcast => ("broadcast", Some(Collective::Broadcast)),
        MoveKind::Permute => ("permute", Some(Collective::SendRecv)),
        MoveKind::AllToAll => ("all_to_all", Some(Collective::Exchange)),
    }
}

/// Per kind: steps that ran as their collective, and steps that fell back to the exchange.
type Paths = BTreeMap<&'static str, (usize, usize)>;

/// Runs `pl`, checks it against the serial reference and its predicted volumes, and tallies
/// the path each structured step took into `paths`.
fn run_and_tally(e: &deinsum_expr::ParsedEinsum, pl: &Plan, paths: &mut Paths) {
    let (got, reps) = run::<f64>(pl, 5, 1 << 16);
    let (abs, rel) = max_error(&got, &naive_seeded(e, 5));
    assert!(rel < 1e-12, "P={}: max abs {abs}, rel {rel}", pl.procs);
    assert_volume(pl, &reps);
    for (s, step) in pl.steps.iter().enumerate() {
        let Some(k) = kind_of(step) else { continue };
        let (name, coll) = collective_of(k);
        let sum = |c: Collective| {
            reps.iter()
                .map(|r: &RunReport| r.steps[s].calls.of(c))
                .sum::<u64>()
        };
        let exchanged = sum(Collective::Exchange);
        let entry = paths.entry(name).or_default();
        match coll {
            None => {
                // A local move is a copy: no call of any kind on any rank.
                assert!(
                    reps.iter().all(|r| r.steps[s].calls.is_empty()),
                    "P={} step {s}: local move communicated",
                    pl.procs
                );
                entry.0 += 1;
            }
            Some(Collective::Exchange) => {
                assert!(
                    exchanged > 0,
                    "P={} step {s}: all-to-all without the exchange",
                    pl.procs
                );
                entry.0 += 1;
            }
            Some(c) => {
                let made = sum(c);
                // Either the collective (and no exchange anywhere), or the fallback.
                if exchanged == 0 {
                    assert!(
                        made > 0,
                        "P={} step {s}: {name} made no {c:?} call",
                        pl.procs
                    );
                    entry.0 += 1;
                } else {
                    assert_eq!(made, 0, "P={} step {s}: {name} mixed paths", pl.procs);
                    entry.1 += 1;
                }
            }
        }
    }
}

fn cases() -> Vec<deinsum_expr::ParsedEinsum> {
    vec![
        einsum("ij,jk->ik", &[('i', 7), ('j', 5), ('k', 6)]),
        einsum("ij,jk->ik", &[('i', 37), ('j', 29), ('k', 31)]),
        einsum("ijk,ja,ka->ia", &[('i', 13), ('j', 11), ('k', 9), ('a', 5)]),
        einsum("bij,bjk->bik", &[('b', 6), ('i', 9), ('j', 7), ('k', 5)]),
        einsum("ij,ij->", &[('i', 13), ('j', 11)]),
        einsum("ij,j->i", &[('i', 17), ('j', 19)]),
        einsum("i,j->ij", &[('i', 11), ('j', 3)]),
        einsum("ij->ji", &[('i', 9), ('j', 10)]),
    ]
}

/// P = 1..16 over plans of every fusion, with and without a memory budget (phased plans fetch
/// windows by all-gathers): every structured kind that occurs runs as its collective.
#[test]
fn structured_moves_run_as_their_collective() {
    let mut paths = Paths::new();
    for e in &cases() {
        let t = left_tree(e);
        for p in 1..=16 {
            for fusion in [fused(&t), unfused(&t)] {
                run_and_tally(e, &plan(e, &t, &fusion, p), &mut paths);
            }
            let free = build(
                e,
                &PlanOptions {
                    procs: p,
                    ..Default::default()
                },
            )
            .expect("plans");
            for frac in [0.75, 0.5] {
                let s = (free.prediction.max_peak_memory as f64 * frac) as u64;
                if let Ok(pl) = build(
                    e,
                    &PlanOptions {
                        procs: p,
                        mem: Some(s),
                        ..Default::default()
                    },
                ) {
                    run_and_tally(e, &pl, &mut paths);
                }
            }
        }
    }
    eprintln!("kind: (as its collective, fell back to the exchange) = {paths:?}");
    for kind in [
        "all_gather",
        "reduce_scatter",
        "reduce",
        "local",
        "all_to_all",
    ] {
        let (coll, _) = paths.get(kind).copied().unwrap_or_default();
        assert!(coll > 0, "no {kind} move ran as its collective: {paths:?}");
    }
}

/// A redistribution step of `tensor` from `from` to `to`, classified as the planner does.
fn move_step(
    pl: &Plan,
    tensor: usize,
    from: &Distribution,
    to: &Distribution,
    sum: bool,
) -> PlanStep {
    let shape = pl.tensor(tensor).expect("tensor").shape.clone();
    let mv = MoveView::new(&shape, from, to, sum, pl.procs);
    let volume = mv.volume(false);
    PlanStep::Redistribute {
        tensor,
        from: from.clone(),
        to: to.clone(),
        sum,
        pattern: mv.kind(volume.total),
        volume,
    }
}

fn grid(dims: &[(char, usize)]) -> Grid {
    Grid {
        dims: dims
            .iter()
            .map(|&(index, size)| GridDim { index, size })
            .collect(),
    }
}

fn dist(g: Grid, split: Vec<Vec<usize>>) -> Distribution {
    Distribution {
        grid: g,
        split,
        partial: Vec::new(),
        window: Vec::new(),
        balanced: false,
    }
}

/// `pl` with its output walked through a gather, a broadcast, a local slice, a permutation
/// (when P has two distinct factors) and back; and its first summing move split into an
/// all-reduce and the move from the all-reduced blocks.
fn with_every_kind(pl: &Plan) -> Plan {
    let mut pl = pl.clone();
    let p = pl.procs;
    let (out, d0) = pl.output.clone();
    if d0.split.len() == 2 {
        let rep = dist(grid(&[('i', p)]), vec![vec![], vec![]]);
        let row = dist(grid(&[('i', p)]), vec![vec![0], vec![]]);
        let mut chain = vec![d0.clone(), Distribution::on_root(2), rep, row];
        if let Some(a) = (2..p).find(|&a| p.is_multiple_of(a) && a * a != p) {
            let b = p / a;
            chain.push(dist(grid(&[('i', a), ('k', b)]), vec![vec![0], vec![1]]));
            chain.push(dist(grid(&[('k', b), ('i', a)]), vec![vec![1], vec![0]]));
        }
        chain.push(d0);
        for w in chain.windows(2) {
            let s = move_step(&pl, out, &w[0], &w[1], false);
            pl.steps.push(s);
        }
    }
    let summing = pl
        .steps
        .iter()
        .position(|s| matches!(s, PlanStep::Redistribute { sum: true, .. }));
    if let Some(i) = summing {
        let PlanStep::Redistribute {
            tensor, from, to, ..
        } = pl.steps[i].clone()
        else {
            unreachable!()
        };
        let all = Distribution {
            partial: Vec::new(),
            ..from.clone()
        };
        let first = move_step(&pl, tensor, &from, &all, true);
        let second = move_step(&pl, tensor, &all, &to, false);
        pl.steps.splice(i..=i, [first, second]);
    }
    pl
}

/// Every kind, on P = 1..16: the planner's moves plus crafted gathers, broadcasts,
/// permutations and all-reduces run as their collectives and stay exact.
#[test]
fn every_kind_runs_as_its_collective() {
    let mut paths = Paths::new();
    for e in &cases()[..3] {
        let t = left_tree(e);
        for p in 1..=16 {
            for fusion in [fused(&t), unfused(&t)] {
                let pl = with_every_kind(&plan(e, &t, &fusion, p));
                run_and_tally(e, &pl, &mut paths);
            }
        }
    }
    eprintln!("kind: (as its collective, fell back to the exchange) = {paths:?}");
    for kind in [
        "all_reduce",
        "gather",
        "broadcast",
        "permute",
        "local",
        "all_to_all",
    ] {
        let (coll, _) = paths.get(kind).copied().unwrap_or_default();
        assert!(coll > 0, "no {kind} move ran as its collective: {paths:?}");
    }
}

/// A move's kind is checked against its transfers, not trusted: general all-to-alls
/// relabelled as all-gathers, reduce-scatters or permutations fall back to the exchange on
/// every rank (or, where their transfers do have that shape, run as it), and stay exact.
#[test]
fn a_kind_that_does_not_fit_falls_back_to_the_exchange() {
    let e = einsum("ijk,ja,ka->ia", &[('i', 13), ('j', 11), ('k', 9), ('a', 5)]);
    let t = left_tree(&e);
    let mut fell_back = 0;
    for p in [3, 4, 6, 7, 12] {
        for (n, lie) in [
            MoveKind::AllGather { dims: vec![0] },
            MoveKind::ReduceScatter { dims: vec![0] },
            MoveKind::Permute,
        ]
        .into_iter()
        .enumerate()
        {
            let mut pl = plan(&e, &t, &unfused(&t), p);
            let mut relabelled = Vec::new();
            for (s, step) in pl.steps.iter_mut().enumerate() {
                if let PlanStep::Redistribute {
                    pattern, volume, ..
                } = step
                {
                    if *pattern == MoveKind::AllToAll && volume.total > 0 && s % 3 == n {
                        *pattern = lie.clone();
                        relabelled.push(s);
                    }
                }
            }
            let (got, reps) = run::<f64>(&pl, 5, 1 << 16);
            let (_, rel) = max_error(&got, &naive_seeded(&e, 5));
            assert!(rel < 1e-12, "P={p}: rel {rel}");
            assert_volume(&pl, &reps);
            for s in relabelled {
                let ex: u64 = reps
                    .iter()
                    .map(|r| r.steps[s].calls.of(Collective::Exchange))
                    .sum();
                let other: u64 = reps
                    .iter()
                    .map(|r| {
                        r.steps[s].calls.0.iter().sum::<u64>()
                            - r.steps[s].calls.of(Collective::Exchange)
                    })
                    .sum();
                // Where the transfers happen to have the labelled shape, the collective is
                // exact (checked above); otherwise the whole step took the exchange.
                assert!(
                    (ex > 0) != (other > 0),
                    "P={p} step {s} ({lie:?}): {ex} exchanges, {other} other calls"
                );
                if ex > 0 {
                    fell_back += 1;
                }
            }
        }
    }
    assert!(fell_back > 0, "no relabelled move fell back");
}

/// `d` in balanced blocks.
fn balanced(mut d: Distribution) -> Distribution {
    d.balanced = true;
    d
}

/// Balanced blocks (the canonical inputs' blocking) on P = 1..16: moves into and out of them
/// are exact, and between two balanced distributions the permutation and the all-gather run
/// as their collectives.
#[test]
fn balanced_blocks_run_as_their_collectives() {
    let mut paths = Paths::new();
    let mut uneven = 0;
    for e in &cases()[..3] {
        let t = left_tree(e);
        for p in 1..=16 {
            let mut pl = plan(e, &t, &unfused(&t), p);
            let (out, d0) = pl.output.clone();
            if d0.split.len() != 2 {
                continue;
            }
            let shape = pl.tensor(out).expect("output").shape.clone();
            uneven += usize::from(!shape[0].is_multiple_of(p));
            let mut chain = vec![
                d0.clone(),
                balanced(dist(grid(&[('i', p)]), vec![vec![0], vec![]])),
            ];
            if let Some(a) = (2..p).find(|&a| p.is_multiple_of(a) && a * a != p) {
                let b = p / a;
                chain.push(balanced(dist(
                    grid(&[('i', a), ('k', b)]),
                    vec![vec![0], vec![1]],
                )));
                chain.push(balanced(dist(
                    grid(&[('k', b), ('i', a)]),
                    vec![vec![1], vec![0]],
                )));
                chain.push(balanced(dist(
                    grid(&[('k', b), ('i', a)]),
                    vec![vec![1], vec![]],
                )));
            }
            chain.push(d0);
            for w in chain.windows(2) {
                let s = move_step(&pl, out, &w[0], &w[1], false);
                pl.steps.push(s);
            }
            run_and_tally(e, &pl, &mut paths);
        }
    }
    eprintln!("kind: (as its collective, fell back to the exchange) = {paths:?}");
    assert!(uneven > 0, "no case cuts uneven balanced blocks");
    for kind in ["permute", "all_gather", "all_to_all"] {
        let (coll, _) = paths.get(kind).copied().unwrap_or_default();
        assert!(coll > 0, "no {kind} move ran as its collective: {paths:?}");
    }
}

/// In-process all-gathers build one target block that the fibre's ranks share: here the
/// output is all-gathered at the end (the run returns a shared block) or all-gathered and
/// sliced back (a shared block is the source of the next move), on P = 1..7 with extents no
/// P divides, in runs repeated after a warm-up (the shared block goes back to its builder's
/// pool between runs): equal to the serial result, with the predicted words on every rank.
#[test]
fn shared_all_gather_blocks_are_exact() {
    let mut gathers = 0;
    for e in &cases()[..3] {
        let t = left_tree(e);
        for p in 1..=7 {
            for fusion in [fused(&t), unfused(&t)] {
                let base = plan(e, &t, &fusion, p);
                let (out, d0) = base.output.clone();
                let all = Distribution {
                    split: vec![Vec::new(); d0.split.len()],
                    ..d0.clone()
                };
                let mut ends = base.clone();
                ends.steps.push(move_step(&ends, out, &d0, &all, false));
                ends.output = (out, all.clone());
                let mut back = ends.clone();
                back.steps.push(move_step(&back, out, &all, &d0, false));
                back.output = (out, d0.clone());
                for pl in [ends, back] {
                    let opts = deinsum_exec::ExecOptions {
                        repeat: 2,
                        warmup: 1,
                        ..Default::default()
                    };
                    let (got, reps) = run_with::<f64>(&pl, 5, &opts);
                    let (abs, rel) = max_error(&got, &naive_seeded(e, 5));
                    assert!(rel < 1e-12, "P={p}: max abs {abs}, rel {rel}");
                    assert_volume(&pl, &reps);
                    let s = base.steps.len();
                    if matches!(kind_of(&pl.steps[s]), Some(MoveKind::AllGather { .. })) {
                        let calls: u64 = reps
                            .iter()
                            .map(|r| r.steps[s].calls.of(Collective::AllGather))
                            .sum();
                        assert!(calls > 0, "P={p}: the output's all-gather");
                        gathers += 1;
                    }
                }
            }
        }
    }
    assert!(gathers > 0, "no output was all-gathered");
}
