//! Distributed equals serial, for every P from 1 to 16, with measured volume per rank equal to
//! the plan's prediction.

mod support;
use deinsum_exec::reference::{max_error, naive_seeded};
use deinsum_exec::Communicator;
use deinsum_path::{NodeId, StepId};
use support::*;

const PS: std::ops::RangeInclusive<usize> = 1..=16;

#[test]
fn matmul_1mm_every_p() {
    let e = einsum("ij,jk->ik", &[('i', 7), ('j', 5), ('k', 6)]);
    let t = left_tree(&e);
    for p in PS {
        check(&e, &t, &unfused(&t), p, 1 << 16);
    }
}

/// Repeated runs (after warm-up runs) and several threads per rank give the serial result,
/// move exactly the predicted words in the reported run and report one sample per timed run.
#[test]
fn repeated_runs_with_threads_equal_serial() {
    let cases = [
        einsum("ij,jk->ik", &[('i', 37), ('j', 29), ('k', 31)]),
        einsum("ijk,ja,ka->ia", &[('i', 13), ('j', 11), ('k', 9), ('a', 5)]),
        einsum("bij,bjk->bik", &[('b', 6), ('i', 9), ('j', 7), ('k', 5)]),
    ];
    let opts = deinsum_exec::ExecOptions {
        repeat: 3,
        warmup: 1,
        threads: 2,
        ..deinsum_exec::ExecOptions::default()
    };
    for e in &cases {
        let t = left_tree(e);
        for (p, fusion) in [
            (1, fused(&t)),
            (2, unfused(&t)),
            (3, fused(&t)),
            (7, unfused(&t)),
        ] {
            let pl = plan(e, &t, &fusion, p);
            let (got, reps) = run_with::<f64>(&pl, 3, &opts);
            let (abs, rel) = max_error(&got, &naive_seeded(e, 3));
            assert!(rel < 1e-12, "P={p}: max abs {abs}, rel {rel}");
            assert_volume(&pl, &reps);
            assert_memory(&pl, &reps);
            for r in &reps {
                assert_eq!(r.threads, 2);
                for m in &r.steps {
                    assert_eq!(m.samples.len(), 3, "rank {} step {}", r.rank, m.step);
                }
            }
        }
    }
}

#[test]
fn matmul_2mm_and_3mm() {
    let e = einsum("ij,jk,kl->il", &[('i', 5), ('j', 7), ('k', 3), ('l', 4)]);
    let t = left_tree(&e);
    for p in PS {
        check(&e, &t, &unfused(&t), p, 1 << 16);
    }
    let e = einsum(
        "ij,jk,kl,lm->im",
        &[('i', 4), ('j', 5), ('k', 3), ('l', 6), ('m', 5)],
    );
    let t = left_tree(&e);
    for p in PS {
        check(&e, &t, &unfused(&t), p, 1 << 16);
    }
}

#[test]
fn paper_example_fused_and_unfused() {
    // ijk,ja,ka,al->il: the MTTKRP (KRP fused) followed by a matrix product.
    let e = einsum(
        "ijk,ja,ka,al->il",
        &[('i', 5), ('j', 4), ('k', 3), ('a', 3), ('l', 2)],
    );
    let t = tree(&e, &[(&[1, 2], "jka"), (&[0, 4], "ia"), (&[5, 3], "il")]);
    for p in PS {
        check(&e, &t, &unfused(&t), p, 1 << 16);
        check(&e, &t, &fusion(&t, &[vec![0, 1], vec![2]]), p, 4);
        check(&e, &t, &fusion(&t, &[vec![0, 1], vec![2]]), p, 1 << 16);
    }
}

fn mttkrp(order: usize, mode: usize, p: usize) {
    let letters = ['i', 'j', 'k', 'l', 'm'];
    let ext = [3usize, 4, 2, 3, 2];
    let idx: String = letters[..order].iter().collect();
    let mut ops = vec![idx.clone()];
    for (d, &c) in letters[..order].iter().enumerate() {
        if d != mode {
            ops.push(format!("{c}a"));
        }
    }
    let expr = format!("{}->{}a", ops.join(","), letters[mode]);
    let mut xs: Vec<(char, usize)> = letters[..order].iter().copied().zip(ext).collect();
    xs.push(('a', 3));
    let e = einsum(&expr, &xs);
    // KRP of the factors first (Hadamard over a), then the contraction with the tensor.
    let n = e.inputs().len();
    let mut steps: Vec<(Vec<usize>, String)> = Vec::new();
    let others: Vec<char> = letters[..order]
        .iter()
        .copied()
        .filter(|&c| c != letters[mode])
        .collect();
    let mut cur = 1usize;
    let mut cur_idx = format!("{}a", others[0]);
    for (f, &c) in others.iter().enumerate().skip(1) {
        cur_idx = format!("{}{}a", &cur_idx[..cur_idx.len() - 1], c);
        steps.push((vec![cur, f + 1], cur_idx.clone()));
        cur = NodeId::of_step(n, StepId(steps.len() - 1)).index();
    }
    steps.push((vec![0, cur], format!("{}a", letters[mode])));
    let st: Vec<(&[usize], &str)> = steps
        .iter()
        .map(|(a, b)| (a.as_slice(), b.as_str()))
        .collect();
    let t = tree(&e, &st);
    let all: Vec<usize> = (0..t.steps.len()).collect();
    check(&e, &t, &fusion(&t, std::slice::from_ref(&all)), p, 5);
    check(&e, &t, &fusion(&t, &[all]), p, 1 << 16);
}

#[test]
fn mttkrp_order3_every_mode() {
    for mode in 0..3 {
        for p in PS {
            mttkrp(3, mode, p);
        }
    }
}

#[test]
fn mttkrp_order5_every_mode() {
    for mode in 0..5 {
        for p in [1, 2, 3, 5, 7, 8, 12, 16] {
            mttkrp(5, mode, p);
        }
    }
}

#[test]
fn ttmc() {
    // Tucker: ijk,jb,kc->ibc.
    let e = einsum(
        "ijk,jb,kc->ibc",
        &[('i', 4), ('j', 5), ('k', 3), ('b', 2), ('c', 3)],
    );
    let t = tree(&e, &[(&[0, 1], "ikb"), (&[3, 2], "ibc")]);
    for p in PS {
        check(&e, &t, &unfused(&t), p, 1 << 16);
    }
}

#[test]
fn batched_outer_hadamard_scalar() {
    let cases: Vec<(&str, Vec<(char, usize)>)> = vec![
        ("bij,bjk->bik", vec![('b', 3), ('i', 4), ('j', 5), ('k', 2)]),
        ("ij,ij->ij", vec![('i', 5), ('j', 7)]),
        ("i,j->ij", vec![('i', 5), ('j', 7)]),
        ("ij,ij->", vec![('i', 5), ('j', 7)]),
        ("ijk,ik->kj", vec![('i', 3), ('j', 5), ('k', 4)]),
        ("ij->ji", vec![('i', 5), ('j', 7)]),
        ("ijk->j", vec![('i', 3), ('j', 5), ('k', 4)]),
    ];
    for (expr, ext) in cases {
        let e = einsum(expr, &ext);
        let t = left_tree(&e);
        for p in PS {
            check(&e, &t, &unfused(&t), p, 1 << 16);
        }
    }
}

#[test]
fn diagonals_and_broadcast() {
    // A repeated index inside an operand reads its diagonal; `1` is an extent-1 broadcast dim.
    let cases: Vec<(&str, Vec<(char, usize)>)> = vec![
        ("ii->i", vec![('i', 6)]),
        ("iij,jk->ik", vec![('i', 4), ('j', 5), ('k', 3)]),
        ("1ij,jk->ik", vec![('i', 4), ('j', 5), ('k', 3)]),
        ("ij,j1->ij", vec![('i', 4), ('j', 5)]),
    ];
    for (expr, ext) in cases {
        let e = einsum(expr, &ext);
        let t = left_tree(&e);
        for p in PS {
            check(&e, &t, &unfused(&t), p, 1 << 16);
        }
    }
}

#[test]
fn plans_really_move_data_and_f32_agrees() {
    let e = einsum("ij,jk->ik", &[('i', 9), ('j', 8), ('k', 7)]);
    let t = left_tree(&e);
    let pl = plan(&e, &t, &unfused(&t), 4);
    let (got, reps) = run::<f32>(&pl, 3, 1 << 16);
    let moved: u64 = reps.iter().flat_map(|r| &r.steps).map(|m| m.received).sum();
    assert!(
        moved > 0,
        "a 4-rank matmul from canonical distributions moves data"
    );
    assert_volume(&pl, &reps);
    let want = deinsum_exec::reference::naive_seeded(&e, 3);
    let (_, rel) = deinsum_exec::reference::max_error(&got, &want);
    assert!(rel < 1e-5, "f32 rel error {rel}");
    // A different seed gives a different result (the check can fail).
    let other = deinsum_exec::reference::naive_seeded(&e, 4);
    let (_, rel) = deinsum_exec::reference::max_error(&got, &other);
    assert!(rel > 1e-2);
}

#[test]
fn bad_local_block_fails_the_run_with_that_ranks_error() {
    use deinsum_exec::{execute, ExecError, InProcess, Inputs, RankFailure};
    let e = einsum("ij,jk->ik", &[('i', 6), ('j', 5), ('k', 4)]);
    let t = left_tree(&e);
    let pl = plan(&e, &t, &unfused(&t), 3);
    let world = InProcess::new(3).unwrap();
    let r = world.run(|comm| {
        let mut blocks = std::collections::BTreeMap::new();
        for (k, op) in e.inputs().iter().enumerate() {
            let shape: Vec<usize> = op.indices.iter().map(|&c| e.extent(c)).collect();
            let n = pl
                .steps
                .iter()
                .find_map(|s| match s {
                    deinsum_plan::PlanStep::Load { tensor, dist } if *tensor == k => {
                        dist.block(comm.rank(), &shape)
                    }
                    _ => None,
                })
                .map_or(0, |b| b.len() as usize);
            // Rank 1 hands over one element too few for operand 0.
            let n = if comm.rank() == 1 && k == 0 {
                n.saturating_sub(1)
            } else {
                n
            };
            blocks.insert(k, vec![1.0f64; n]);
        }
        execute(&pl, comm, &Inputs::Blocks(blocks)).map(|_| ())
    });
    match r {
        Err(RankFailure::Error {
            rank: 1,
            error: ExecError::Input { operand: 0, .. },
        }) => {}
        other => panic!("expected rank 1's input error, got {other:?}"),
    }
}

#[test]
fn ranks_with_different_plans_refuse_to_run() {
    use deinsum_exec::{execute, ExecError, InProcess, Inputs, RankFailure};
    let e = einsum("ij,jk->ik", &[('i', 6), ('j', 5), ('k', 4)]);
    let t = left_tree(&e);
    let a = plan(&e, &t, &unfused(&t), 2);
    let mut b = a.clone();
    b.expression.push(' ');
    let world = InProcess::new(2).unwrap();
    let r = world.run(|comm| {
        let p = if comm.rank() == 0 { &a } else { &b };
        execute::<f64, _>(p, comm, &Inputs::Seeded { seed: 1 }).map(|_| ())
    });
    assert!(
        matches!(
            r,
            Err(RankFailure::Error {
                error: ExecError::PlanMismatch { .. },
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn full_inputs_equal_seeded_inputs() {
    use deinsum_exec::data::seeded_value;
    let e = einsum("iij,jk->ik", &[('i', 4), ('j', 5), ('k', 3)]);
    let t = left_tree(&e);
    let pl = plan(&e, &t, &unfused(&t), 5);
    let full: Vec<Vec<f64>> = e
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, op)| {
            let n: usize = op.shape(e.extents()).iter().product();
            (0..n as u64).map(|x| seeded_value(9, k, x)).collect()
        })
        .collect();
    let world = deinsum_exec::InProcess::new(5).unwrap();
    let got = world
        .run(|comm| {
            let t = deinsum_exec::execute(&pl, comm, &deinsum_exec::Inputs::Full(full.clone()))?;
            t.gather(comm)
        })
        .unwrap();
    let (seeded, _) = run::<f64>(&pl, 9, 1 << 16);
    assert_eq!(got[0].as_ref().unwrap(), &seeded);
}

/// Runs `pl` on operands lent whole (the seeded values of `seed`) with `opts`; returns the
/// gathered output and every rank's report.
fn run_lent(
    pl: &deinsum_plan::Plan,
    seed: u64,
    opts: &deinsum_exec::ExecOptions,
) -> (Vec<f64>, Vec<deinsum_exec::RunReport>) {
    use deinsum_exec::data::seeded_value;
    let e = &pl.einsum;
    let full: Vec<Vec<f64>> = e
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, op)| {
            let n: usize = op.shape(e.extents()).iter().product();
            (0..n as u64).map(|x| seeded_value(seed, k, x)).collect()
        })
        .collect();
    let lent: Vec<&[f64]> = full.iter().map(|v| v.as_slice()).collect();
    let world = deinsum_exec::InProcess::new(pl.procs).unwrap();
    let res = world
        .run(|comm| {
            let (t, rep) = deinsum_exec::execute_lent(pl, comm, &lent, opts)?;
            Ok::<_, deinsum_exec::ExecError>((t.gather(comm)?, rep))
        })
        .unwrap_or_else(|e| panic!("lent run failed: {e}"));
    let mut out = None;
    let mut reps = Vec::new();
    for (g, r) in res {
        out = out.or(g);
        reps.push(r);
    }
    (out.expect("rank 0 gathers"), reps)
}

/// Lent operands (blocks read in place where contiguous, copied out elsewhere) give exactly
/// the seeded inputs' result for many P, move the predicted words, and hold no more than the
/// seeded run: a block read in place takes no rank memory.
#[test]
fn lent_operands_equal_seeded_inputs_for_many_p() {
    let cases = [
        einsum("ij,jk->ik", &[('i', 13), ('j', 7), ('k', 11)]),
        einsum("ijk,ja,ka->ia", &[('i', 9), ('j', 7), ('k', 5), ('a', 3)]),
        einsum(
            "ijk,ia,jb,kc->abc",
            &[('i', 7), ('j', 6), ('k', 5), ('a', 3), ('b', 2), ('c', 4)],
        ),
        einsum("iij,jk->ik", &[('i', 4), ('j', 5), ('k', 3)]),
        einsum("ij->ij", &[('i', 7), ('j', 5)]),
        einsum("ij->ji", &[('i', 7), ('j', 5)]),
    ];
    for e in &cases {
        let t = left_tree(e);
        for p in [1, 2, 3, 4, 5, 7, 8, 11] {
            for (fusion, repeat) in [(unfused(&t), 1), (fused(&t), 2)] {
                let pl = plan(e, &t, &fusion, p);
                let opts = deinsum_exec::ExecOptions {
                    repeat,
                    ..deinsum_exec::ExecOptions::default()
                };
                let (want, seeded) = run_with::<f64>(&pl, 5, &opts);
                let (got, reps) = run_lent(&pl, 5, &opts);
                assert_eq!(got, want, "{:?} P={p}", e.inputs());
                assert_volume(&pl, &reps);
                assert_memory(&pl, &reps);
                for (l, s) in reps.iter().zip(&seeded) {
                    assert!(l.peak_words <= s.peak_words, "rank {}", l.rank);
                }
            }
        }
    }
}

/// Plans for inputs in place (every rank loads its block in the distribution its group needs,
/// replicated ones whole) on lent operands: the serial result for many P, no input moved, and
/// the measured words equal to the plan's.
#[test]
fn lent_operands_in_place_plans_move_no_input() {
    let cases = [
        einsum("ij,jk->ik", &[('i', 13), ('j', 7), ('k', 11)]),
        einsum("ijk,ja,ka->ia", &[('i', 9), ('j', 7), ('k', 5), ('a', 3)]),
        einsum(
            "ijk,ja,ka,al->il",
            &[('i', 6), ('j', 5), ('k', 7), ('a', 4), ('l', 3)],
        ),
        einsum("iij,jk->ik", &[('i', 4), ('j', 5), ('k', 3)]),
        einsum("ij->ji", &[('i', 7), ('j', 5)]),
    ];
    for e in &cases {
        let t = left_tree(e);
        for p in [1, 2, 3, 4, 5, 7, 8, 11] {
            for fusion in [unfused(&t), fused(&t)] {
                let opts = deinsum_plan::PlanOptions {
                    procs: p,
                    inputs_in_place: true,
                    ..deinsum_plan::PlanOptions::default()
                };
                let pl = deinsum_plan::build_from(e, &t, Vec::new(), &fusion, &opts).unwrap();
                let (got, reps) = run_lent(&pl, 4, &deinsum_exec::ExecOptions::default());
                let (abs, rel) = max_error(&got, &naive_seeded(e, 4));
                assert!(rel < 1e-12, "P={p}: max abs {abs}, rel {rel}");
                assert_volume(&pl, &reps);
                assert_memory(&pl, &reps);
                let inputs = e.inputs().len();
                for s in &pl.steps {
                    if let deinsum_plan::PlanStep::Redistribute { tensor, .. } = s {
                        assert!(*tensor >= inputs, "input {tensor} moved at P={p}");
                    }
                }
            }
        }
    }
}

/// On one rank every operand of a plain matrix product is read in place: the run's peak is
/// its output block alone.
#[test]
fn lent_whole_operands_take_no_rank_memory() {
    let e = einsum("ij,jk->ik", &[('i', 13), ('j', 7), ('k', 11)]);
    let t = left_tree(&e);
    let pl = plan(&e, &t, &unfused(&t), 1);
    let (_, reps) = run_lent(&pl, 3, &deinsum_exec::ExecOptions::default());
    assert_eq!(reps[0].peak_words, 13 * 11);
    let (_, seeded) = run_with::<f64>(&pl, 3, &deinsum_exec::ExecOptions::default());
    assert_eq!(seeded[0].peak_words, 13 * 7 + 7 * 11 + 13 * 11);
}
