//! Hand-built trees and fusions for planner tests (independent of the path and soap crates).
#![allow(dead_code)]

use deinsum_expr::{Dim, Index, Operand, ParsedEinsum};
use deinsum_path::{ContractionTree, NodeId, Step, StepId};
use deinsum_soap::{Access, FusedGroup, Fusion, IoBound};
use std::collections::BTreeMap;

/// An einsum over the given operand index strings, output and extents.
pub fn einsum(inputs: &[&str], output: &str, ext: &[(char, usize)]) -> ParsedEinsum {
    ParsedEinsum::from_parts(
        inputs
            .iter()
            .map(|s| Operand::new(s.chars().map(Dim::Index).collect()))
            .collect(),
        output.chars().collect(),
        ext.iter().copied().collect(),
    )
}

/// A tree from steps given as (operand node ids, output indices).
pub fn tree(e: &ParsedEinsum, steps: &[(&[usize], &str)]) -> ContractionTree {
    let leaf: Vec<Vec<Index>> = (0..e.num_inputs())
        .map(|k| e.input_indices(k).to_vec())
        .collect();
    let mut nodes = leaf.clone();
    let mut out = Vec::new();
    for (ops, o) in steps {
        let st = Step {
            operands: ops.iter().copied().map(NodeId).collect(),
            operand_indices: ops.iter().map(|&n| nodes[n].clone()).collect(),
            output: o.chars().collect(),
        };
        nodes.push(st.output.clone());
        out.push(st);
    }
    ContractionTree {
        num_inputs: e.num_inputs(),
        leaf_indices: leaf,
        steps: out,
        extents: e.extents().clone(),
    }
}

/// A fused group of the given tree steps (a contiguous run ending at its result).
pub fn group(t: &ContractionTree, steps: &[usize]) -> FusedGroup {
    let produced: Vec<NodeId> = steps.iter().map(|&s| t.node_of(StepId(s))).collect();
    let mut inputs = Vec::new();
    let mut indices: Vec<Index> = Vec::new();
    for &s in steps {
        let st = &t.steps[s];
        for &n in &st.operands {
            if !produced.contains(&n) {
                inputs.push(Access {
                    node: n.index(),
                    indices: t.node_indices(n).to_vec(),
                });
            }
        }
        for c in st.indices() {
            if !indices.contains(&c) {
                indices.push(c);
            }
        }
    }
    let last = *steps.last().unwrap();
    let volume = indices.iter().map(|c| t.extents[c] as f64).product();
    FusedGroup {
        steps: steps.to_vec(),
        indices: indices.clone(),
        inputs,
        output: Access {
            node: t.node_of(StepId(last)).index(),
            indices: t.steps[last].output.clone(),
        },
        extents: indices.iter().map(|c| (*c, t.extents[c])).collect(),
        volume,
        bound: IoBound {
            rho: 1.0,
            x0: 1.0,
            tile: BTreeMap::new(),
            q: 0.0,
        },
    }
}

/// A fusion from groups of step lists.
pub fn fusion(t: &ContractionTree, groups: &[&[usize]]) -> Fusion {
    Fusion {
        groups: groups.iter().map(|g| group(t, g)).collect(),
        q_total: 0.0,
        runner_up_q: None,
    }
}

/// Matrix multiplication ij,jk->ik with extent n.
pub fn mm(n: usize) -> (ParsedEinsum, ContractionTree, Fusion) {
    let e = einsum(&["ij", "jk"], "ik", &[('i', n), ('j', n), ('k', n)]);
    let t = tree(&e, &[(&[0, 1], "ik")]);
    let f = fusion(&t, &[&[0]]);
    (e, t, f)
}

/// The Deinsum example ijk,ja,ka,al->il: fused MTTKRP (KRP + TDOT), then the MM.
pub fn mttkrp_mm(n: usize) -> (ParsedEinsum, ContractionTree, Fusion) {
    let e = einsum(
        &["ijk", "ja", "ka", "al"],
        "il",
        &[('i', n), ('j', n), ('k', n), ('a', n), ('l', n)],
    );
    let t = tree(&e, &[(&[1, 2], "jka"), (&[0, 4], "ia"), (&[5, 3], "il")]);
    let f = fusion(&t, &[&[0, 1], &[2]]);
    (e, t, f)
}

/// Order-3 MTTKRP ijk,ja,ka->ia, fused.
pub fn mttkrp3(ni: usize, r: usize) -> (ParsedEinsum, ContractionTree, Fusion) {
    let e = einsum(
        &["ijk", "ja", "ka"],
        "ia",
        &[('i', ni), ('j', ni), ('k', ni), ('a', r)],
    );
    let t = tree(&e, &[(&[1, 2], "jka"), (&[0, 3], "ia")]);
    let f = fusion(&t, &[&[0, 1]]);
    (e, t, f)
}
