//! Fusion partitions: legality, the exhaustive search against the tree DP, errors.

use deinsum_path::{ContractionTree, NodeId, Step, StepId};
use deinsum_soap::{analyze, analyze_with, SearchMode, SoapError};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn v(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn step(ops: &[usize], ins: &[&str], out: &str) -> Step {
    Step {
        operands: ops.iter().copied().map(NodeId).collect(),
        operand_indices: ins.iter().map(|s| v(s)).collect(),
        output: v(out),
    }
}

fn tree(leaves: &[&str], steps: Vec<Step>, e: &[(char, usize)]) -> ContractionTree {
    ContractionTree {
        num_inputs: leaves.len(),
        leaf_indices: leaves.iter().map(|s| v(s)).collect(),
        steps,
        extents: e.iter().copied().collect(),
    }
}

#[test]
fn mttkrp_order4_fuses_both_khatri_rao_steps() {
    // ijkl,ja,ka,la->ia along ja,ka->jka; jka,la->jkla; ijkl,jkla->ia.
    let e: Vec<(char, usize)> = "ijkla".chars().map(|c| (c, 40)).collect();
    let t = tree(
        &["ijkl", "ja", "ka", "la"],
        vec![
            step(&[1, 2], &["ja", "ka"], "jka"),
            step(&[4, 3], &["jka", "la"], "jkla"),
            step(&[0, 5], &["ijkl", "jkla"], "ia"),
        ],
        &e,
    );
    let f = analyze(&t, 4096.0).unwrap();
    assert_eq!(f.groups.len(), 1);
    assert_eq!(f.groups[0].steps, vec![0, 1, 2]);
    assert_eq!(f.groups[0].einsum_string(), "ijkl,ja,ka,la->ia");
    assert_eq!(f.groups[0].indices, v("ijkla"));
    // Nothing crosses: the total is the single group's bound.
    assert_eq!(f.q_total, f.groups[0].bound.q);
    assert!(f.runner_up_q.unwrap() > f.q_total);
}

#[test]
fn small_statement_costs_its_footprint() {
    // Everything fits in S: the bound is each word read or written once.
    let t = tree(
        &["ik", "kj"],
        vec![step(&[0, 1], &["ik", "kj"], "ij")],
        &[('i', 4), ('j', 5), ('k', 6)],
    );
    let f = analyze(&t, 1.0e6).unwrap();
    let g = &f.groups[0];
    assert_eq!(g.bound.q, (4 * 6 + 6 * 5 + 4 * 5) as f64);
    assert_eq!(g.bound.tile[&'k'], 6.0);
    assert!((g.bound.rho - g.volume / g.bound.q).abs() < 1e-12);
}

#[test]
fn unary_and_scalar_steps() {
    let t = tree(
        &["ij"],
        vec![step(&[0], &["ij"], "i")],
        &[('i', 300), ('j', 400)],
    );
    let f = analyze(&t, 64.0).unwrap();
    assert_eq!(f.groups.len(), 1);
    assert!(f.groups[0].bound.q >= 300.0 * 400.0);
    let t = tree(
        &["i", "i"],
        vec![step(&[0, 1], &["i", "i"], "")],
        &[('i', 1000)],
    );
    let f = analyze(&t, 16.0).unwrap();
    assert!(f.q_total >= 2000.0 && f.q_total.is_finite());
}

#[test]
fn errors_name_the_problem() {
    let good = tree(
        &["ik", "kj"],
        vec![step(&[0, 1], &["ik", "kj"], "ij")],
        &[('i', 4), ('j', 5), ('k', 6)],
    );
    assert_eq!(analyze(&good, 0.0), Err(SoapError::InvalidMemory(0.0)));
    assert!(matches!(
        analyze(&good, f64::NAN),
        Err(SoapError::InvalidMemory(_))
    ));
    let mut t = good.clone();
    t.extents.remove(&'k');
    assert_eq!(analyze(&t, 10.0), Err(SoapError::MissingExtent('k')));
    let mut t = good.clone();
    t.steps[0].operands = vec![NodeId(0), NodeId(0)];
    assert!(matches!(analyze(&t, 10.0), Err(SoapError::InvalidTree(m)) if m.contains("twice")));
    let mut t = good.clone();
    t.steps[0].output = v("iq");
    assert!(matches!(analyze(&t, 10.0), Err(SoapError::InvalidTree(_))));
    let mut t = good;
    t.steps.clear();
    assert!(matches!(analyze(&t, 10.0), Err(SoapError::InvalidTree(_))));
}

/// A random tree: leaves over a small alphabet, random pairings; a step keeps the indices
/// needed later plus a random subset of the others (so some steps sum nothing and fuse).
fn random_tree(
    leaves: Vec<Vec<usize>>,
    picks: Vec<(usize, usize)>,
    keep: Vec<u8>,
    extents: Vec<usize>,
) -> ContractionTree {
    let alpha: Vec<char> = "abcdefg".chars().collect();
    let leaf_idx: Vec<Vec<char>> = leaves
        .iter()
        .map(|l| {
            let mut x: Vec<char> = Vec::new();
            for &k in l {
                if !x.contains(&alpha[k]) {
                    x.push(alpha[k]);
                }
            }
            x
        })
        .collect();
    let mut live: Vec<(usize, Vec<char>)> = leaf_idx.iter().cloned().enumerate().collect();
    let mut steps = Vec::new();
    let n = leaf_idx.len();
    let mut pk = 0;
    while live.len() > 1 {
        let (a, b) = picks[pk % picks.len()];
        let i = a % live.len();
        let mut j = b % (live.len() - 1);
        if j >= i {
            j += 1;
        }
        let (ia, ib) = (live[i].clone(), live[j].clone());
        let rest: Vec<char> = live
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != i && *k != j)
            .flat_map(|(_, x)| x.1.clone())
            .collect();
        let mut out: Vec<char> = Vec::new();
        for c in ia.1.iter().chain(ib.1.iter()) {
            let keep_it = rest.contains(c) || keep[pk % keep.len()] & (1 << (*c as u8 - b'a')) != 0;
            if keep_it && !out.contains(c) {
                out.push(*c);
            }
        }
        steps.push(Step {
            operands: vec![NodeId(ia.0), NodeId(ib.0)],
            operand_indices: vec![ia.1, ib.1],
            output: out.clone(),
        });
        let id = NodeId::of_step(n, StepId(steps.len() - 1)).index();
        let (hi, lo) = (i.max(j), i.min(j));
        live.remove(hi);
        live.remove(lo);
        live.push((id, out));
        pk += 1;
    }
    let ext: BTreeMap<char, usize> = alpha.iter().copied().zip(extents).collect();
    ContractionTree {
        num_inputs: n,
        leaf_indices: leaf_idx,
        steps,
        extents: ext,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn dp_matches_exhaustive(
        leaves in prop::collection::vec(prop::collection::vec(0usize..7, 1..4), 2..8),
        picks in prop::collection::vec((0usize..10, 0usize..10), 1..8),
        keep in prop::collection::vec(any::<u8>(), 1..8),
        extents in prop::collection::vec(2usize..60, 7),
        s in 8.0f64..4000.0,
    ) {
        let t = random_tree(leaves, picks, keep, extents);
        let (fe, re) = analyze_with(&t, s, SearchMode::Exhaustive).unwrap();
        let (fd, rd) = analyze_with(&t, s, SearchMode::Dp).unwrap();
        let rel = |a: f64, b: f64| ((a - b) / a.max(1e-300)).abs();
        prop_assert!(rel(fe.q_total, fd.q_total) < 1e-9, "best {} vs {}", fe.q_total, fd.q_total);
        prop_assert_eq!(re.is_some(), rd.is_some());
        if let (Some(a), Some(b)) = (re, rd) {
            prop_assert!(rel(a.q_total, b.q_total) < 1e-9, "runner-up {} vs {}", a.q_total, b.q_total);
        }
        // Legality: inside a group, only results of non-summing steps are consumed.
        for g in &fe.groups {
            for &st in &g.steps {
                for &op in &t.steps[st].operands {
                    if let Some(s) = t.step_of(op).filter(|s| g.steps.contains(&s.index())) {
                        prop_assert!(t.steps[s.index()].summed().is_empty());
                    }
                }
            }
        }
        // Every step is in exactly one group, groups in execution order.
        let mut all: Vec<usize> = fe.groups.iter().flat_map(|g| g.steps.clone()).collect();
        all.sort_unstable();
        prop_assert_eq!(all, (0..t.steps.len()).collect::<Vec<_>>());
        let roots: Vec<usize> = fe.groups.iter().map(|g| *g.steps.last().unwrap()).collect();
        prop_assert!(roots.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn dp_handles_long_khatri_rao_chains() {
    // b0 a, b1 a, ... : a Khatri-Rao chain of 15 factors then a contraction with x over all
    // b's: 14 fusable steps, so `Auto` runs the DP; it must agree with exhaustive search.
    let bs: Vec<char> = "bcdefghijklmnop".chars().collect();
    let mut leaves: Vec<String> = bs.iter().map(|c| format!("{c}a")).collect();
    let x: String = bs.iter().collect::<String>() + "z";
    leaves.push(x.clone());
    let mut steps = Vec::new();
    let n = leaves.len();
    let mut acc = format!("{}a", bs[0]);
    let mut acc_node = 0;
    for (k, c) in bs.iter().enumerate().skip(1) {
        let out = format!("{}{}a", &acc[..acc.len() - 1], c);
        steps.push(Step {
            operands: vec![NodeId(acc_node), NodeId(k)],
            operand_indices: vec![v(&acc), v(&format!("{c}a"))],
            output: v(&out),
        });
        acc_node = n + steps.len() - 1;
        acc = out;
    }
    steps.push(Step {
        operands: vec![NodeId(acc_node), NodeId(n - 1)],
        operand_indices: vec![v(&acc), v(&x)],
        output: v("za"),
    });
    let mut e: Vec<(char, usize)> = bs.iter().map(|&c| (c, 2)).collect();
    e.push(('a', 50));
    e.push(('z', 40));
    let refs: Vec<&str> = leaves.iter().map(|s| s.as_str()).collect();
    let t = tree(&refs, steps, &e);
    let (fa, ra) = analyze_with(&t, 256.0, SearchMode::Auto).unwrap();
    let (fe, re) = analyze_with(&t, 256.0, SearchMode::Exhaustive).unwrap();
    assert!(
        (fa.q_total / fe.q_total - 1.0).abs() < 1e-9,
        "{} vs {}",
        fa.q_total,
        fe.q_total
    );
    let (ra, re) = (ra.unwrap(), re.unwrap());
    assert!(
        (ra.q_total / re.q_total - 1.0).abs() < 1e-9,
        "{} vs {}",
        ra.q_total,
        re.q_total
    );
    let groups: Vec<Vec<usize>> = fa.groups.iter().map(|g| g.steps.clone()).collect();
    let ge: Vec<Vec<usize>> = fe.groups.iter().map(|g| g.steps.clone()).collect();
    assert_eq!(groups, ge);
}

#[test]
fn random_trees_exercise_fusion() {
    // The generator behind `dp_matches_exhaustive` does produce fusable (non-summing) steps.
    let mut seed: u64 = 99;
    let mut rnd = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % m) as usize
    };
    let (mut with_fusable, mut multi_group_choice) = (0, 0);
    for _ in 0..40 {
        let leaves: Vec<Vec<usize>> = (0..2 + rnd(6))
            .map(|_| (0..1 + rnd(3)).map(|_| rnd(7)).collect())
            .collect();
        let picks: Vec<(usize, usize)> = (0..1 + rnd(7)).map(|_| (rnd(10), rnd(10))).collect();
        let keep: Vec<u8> = (0..1 + rnd(7)).map(|_| rnd(256) as u8).collect();
        let extents: Vec<usize> = (0..7).map(|_| 2 + rnd(58)).collect();
        let t = random_tree(leaves, picks, keep, extents);
        let fusable = (0..t.steps.len())
            .filter(|&s| {
                t.consumer(t.node_of(StepId(s))).is_some() && t.steps[s].summed().is_empty()
            })
            .count();
        if fusable > 0 {
            with_fusable += 1;
            let f = analyze(&t, 100.0).unwrap();
            if f.groups.len() < t.steps.len() {
                multi_group_choice += 1;
            }
        }
    }
    assert!(
        with_fusable >= 10,
        "only {with_fusable} of 40 random trees have a fusable step"
    );
    assert!(
        multi_group_choice >= 3,
        "fusion chosen in only {multi_group_choice} trees"
    );
}
