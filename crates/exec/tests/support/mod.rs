//! Test support: einsums, trees and fusions built by hand, planned by `deinsum_plan::build_from`,
//! run on in-process ranks and compared with the naive serial reference.
#![allow(dead_code)]

use deinsum_exec::reference::{max_error, naive_seeded};
use deinsum_exec::{execute_measured, ExecOptions, InProcess, Inputs, RunReport, Scalar};
use deinsum_expr::{Dim, Index, Operand, ParsedEinsum};
use deinsum_path::{ContractionTree, NodeId, Step, StepId};
use deinsum_plan::{build_from, Plan, PlanOptions};
use deinsum_soap::{Access, FusedGroup, Fusion, IoBound};
use std::collections::BTreeMap;

/// A minimal einsum reader for tests: letters, `,`, `->`, `.` for a broadcast dim (`1`).
pub fn einsum(expr: &str, ext: &[(char, usize)]) -> ParsedEinsum {
    let (ins, out) = expr.split_once("->").expect("explicit output");
    let inputs: Vec<Operand> = ins
        .split(',')
        .map(|s| {
            Operand::new(
                s.chars()
                    .map(|c| {
                        if c == '1' {
                            Dim::Broadcast
                        } else {
                            Dim::Index(c)
                        }
                    })
                    .collect(),
            )
        })
        .collect();
    let extents: BTreeMap<Index, usize> = ext.iter().copied().collect();
    ParsedEinsum::from_parts(inputs, out.chars().collect(), extents)
}

/// Left-to-right pairwise tree (a unary step for one operand); each step keeps the indices
/// needed later or in the output.
pub fn left_tree(e: &ParsedEinsum) -> ContractionTree {
    let n = e.inputs().len();
    let leaf: Vec<Vec<Index>> = e.inputs().iter().map(|o| o.indices.clone()).collect();
    let mut steps = Vec::new();
    if n == 1 {
        steps.push(Step {
            operands: vec![NodeId(0)],
            operand_indices: vec![leaf[0].clone()],
            output: e.output().to_vec(),
        });
    } else {
        let mut cur = 0usize;
        let mut cur_idx = leaf[0].clone();
        for k in 1..n {
            let last = k == n - 1;
            let mut out: Vec<Index> = Vec::new();
            if last {
                out = e.output().to_vec();
            } else {
                for c in cur_idx.iter().chain(&leaf[k]) {
                    let later = leaf[k + 1..].iter().any(|l| l.contains(c));
                    if (later || e.output().contains(c)) && !out.contains(c) {
                        out.push(*c);
                    }
                }
            }
            steps.push(Step {
                operands: vec![NodeId(cur), NodeId(k)],
                operand_indices: vec![cur_idx.clone(), leaf[k].clone()],
                output: out.clone(),
            });
            cur = NodeId::of_step(n, StepId(steps.len() - 1)).index();
            cur_idx = out;
        }
    }
    ContractionTree {
        num_inputs: n,
        leaf_indices: leaf,
        steps,
        extents: e.extents().clone(),
    }
}

/// A tree from explicit steps `(a, b, out)` over node ids.
pub fn tree(e: &ParsedEinsum, steps: &[(&[usize], &str)]) -> ContractionTree {
    let n = e.inputs().len();
    let mut nodes: Vec<Vec<Index>> = e.inputs().iter().map(|o| o.indices.clone()).collect();
    let mut out_steps = Vec::new();
    for (ops, out) in steps {
        let out: Vec<Index> = out.chars().collect();
        out_steps.push(Step {
            operands: ops.iter().copied().map(NodeId).collect(),
            operand_indices: ops.iter().map(|&i| nodes[i].clone()).collect(),
            output: out.clone(),
        });
        nodes.push(out);
    }
    ContractionTree {
        num_inputs: n,
        leaf_indices: nodes[..n].to_vec(),
        steps: out_steps,
        extents: e.extents().clone(),
    }
}

/// A fusion of `tree` whose groups are the given consecutive runs of steps.
pub fn fusion(tree: &ContractionTree, groups: &[Vec<usize>]) -> Fusion {
    let mut gs = Vec::new();
    for steps in groups {
        let produced: Vec<NodeId> = steps.iter().map(|&s| tree.node_of(StepId(s))).collect();
        let mut indices: Vec<Index> = Vec::new();
        let mut inputs: Vec<Access> = Vec::new();
        for &s in steps {
            for c in tree.steps[s].indices() {
                if !indices.contains(&c) {
                    indices.push(c);
                }
            }
            for &op in &tree.steps[s].operands {
                if !produced.contains(&op) && !inputs.iter().any(|a| a.node == op.index()) {
                    inputs.push(Access {
                        node: op.index(),
                        indices: tree.node_indices(op).to_vec(),
                    });
                }
            }
        }
        let last = *steps.last().unwrap();
        let extents: BTreeMap<Index, usize> =
            indices.iter().map(|&c| (c, tree.extents[&c])).collect();
        let volume = extents.values().map(|&n| n as f64).product();
        gs.push(FusedGroup {
            steps: steps.clone(),
            indices,
            inputs,
            output: Access {
                node: tree.node_of(StepId(last)).index(),
                indices: tree.steps[last].output.clone(),
            },
            extents,
            volume,
            bound: IoBound {
                rho: 1.0,
                x0: 1.0,
                tile: BTreeMap::new(),
                q: 0.0,
            },
        });
    }
    Fusion {
        groups: gs,
        q_total: 0.0,
        runner_up_q: None,
    }
}

/// One group per step.
pub fn unfused(tree: &ContractionTree) -> Fusion {
    let g: Vec<Vec<usize>> = (0..tree.steps.len()).map(|s| vec![s]).collect();
    fusion(tree, &g)
}

/// One group of all steps.
pub fn fused(tree: &ContractionTree) -> Fusion {
    fusion(tree, &[(0..tree.steps.len()).collect()])
}

/// Plans `e` with `tree` and `fusion` for `p` ranks.
pub fn plan(e: &ParsedEinsum, tree: &ContractionTree, fusion: &Fusion, p: usize) -> Plan {
    let opts = PlanOptions {
        procs: p,
        ..PlanOptions::default()
    };
    build_from(e, tree, Vec::new(), fusion, &opts).expect("plan builds")
}

/// Runs `plan` on its ranks; returns the gathered output and every rank's report.
pub fn run<T: Scalar>(plan: &Plan, seed: u64, tile_words: u64) -> (Vec<T>, Vec<RunReport>) {
    let opts = ExecOptions {
        tile_words,
        ..ExecOptions::default()
    };
    run_with(plan, seed, &opts)
}

/// [`run`] with all the executor's options.
pub fn run_with<T: Scalar>(plan: &Plan, seed: u64, opts: &ExecOptions) -> (Vec<T>, Vec<RunReport>) {
    let world = InProcess::new(plan.procs).unwrap();
    let opts = opts.clone();
    let res = world
        .run(|comm| {
            let (t, rep) = execute_measured::<T, _>(plan, comm, &Inputs::Seeded { seed }, &opts)?;
            let g = t.gather(comm)?;
            Ok::<_, deinsum_exec::ExecError>((g, rep))
        })
        .unwrap_or_else(|e| panic!("run failed: {e}"));
    let mut out = None;
    let mut reps = Vec::new();
    for (g, r) in res {
        if let Some(g) = g {
            out = Some(g);
        }
        reps.push(r);
    }
    (out.expect("rank 0 gathers"), reps)
}

/// Asserts that every rank's measured words per Redistribute equal the plan's prediction,
/// and that no other step moves data.
pub fn assert_volume(plan: &Plan, reps: &[RunReport]) {
    for rep in reps {
        for m in &rep.steps {
            if !plan.step_moves(m.step).is_empty() {
                // Predicted in closed form; the executor moved its derived transfers.
                let (sent, received) = plan.step_words(m.step, rep.rank);
                assert_eq!(m.sent, sent, "step {} rank {}", m.step, rep.rank);
                assert_eq!(m.received, received, "step {} rank {}", m.step, rep.rank);
            } else {
                assert_eq!(
                    (m.sent, m.received),
                    (0, 0),
                    "step {} ({}) moved data",
                    m.step,
                    m.kind
                );
            }
        }
    }
}

/// Asserts that no rank held more than the plan's predicted peak memory.
pub fn assert_memory(plan: &Plan, reps: &[RunReport]) {
    for rep in reps {
        let (predicted, with_buffers) = plan.peak_of(rep.rank);
        assert!(
            rep.peak_words <= predicted,
            "rank {}: peak {} words, predicted {}",
            rep.rank,
            rep.peak_words,
            predicted
        );
        assert!(
            rep.peak_words_with_buffers <= with_buffers,
            "rank {}: peak with message buffers {} words, predicted {}",
            rep.rank,
            rep.peak_words_with_buffers,
            with_buffers
        );
    }
}

/// Plans and runs `e` on `p` ranks (f64), checks against the naive reference and the volumes.
pub fn check(e: &ParsedEinsum, tree: &ContractionTree, fusion: &Fusion, p: usize, tile: u64) {
    let pl = plan(e, tree, fusion, p);
    let (got, reps) = run::<f64>(&pl, 7, tile);
    let want = naive_seeded(e, 7);
    assert_eq!(got.len(), want.len());
    let (abs, rel) = max_error(&got, &want);
    assert!(rel < 1e-12, "P={p}: max abs {abs}, rel {rel}");
    assert_volume(&pl, &reps);
    // Tiny tiles keep a partial sum of the output beside each tile, which the plan's model
    // (whole intermediates, no tiling) does not count; at tiles of 64 Ki words and more (these
    // tests' intermediates are smaller) nothing is tiled and the model is an upper bound.
    if tile >= 1 << 16 {
        assert_memory(&pl, &reps);
    }
}
