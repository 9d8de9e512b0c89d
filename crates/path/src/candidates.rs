//! Several good contraction trees instead of one: the k cheapest by FLOPs within a factor of
//! the cheapest, so that a later stage (the planner's time model) can weigh a few more FLOPs
//! against fewer words moved.

use crate::{evaluate, optimize, tree_from_ssa, Flops, PathError, PathInfo, PathOptions};
use deinsum_expr::ParsedEinsum;
use std::collections::BTreeSet;

/// Up to this many operands every pairwise tree is enumerated (6 operands: 2,700 orders of
/// 945 trees); above it the candidates are what the registered strategies return.
pub const ENUMERATE_MAX_OPERANDS: usize = 6;

/// Strategies whose paths are candidates above [`ENUMERATE_MAX_OPERANDS`], each with the
/// largest operand count it is run for: dp and branch-2 grow exponentially (a 30-matrix chain
/// did not plan in 30 s), so beyond their limits only greedy, which is polynomial, is asked.
const STRATEGIES: [(&str, usize); 3] = [("greedy", usize::MAX), ("dp", 14), ("branch-2", 10)];

/// Every pairwise tree of `n` leaves once, as SSA paths (a tree is identified by the leaf
/// sets of its steps; the first order found of each is kept, so the list is deterministic).
fn all_trees(n: usize) -> Vec<Vec<Vec<usize>>> {
    fn walk(
        nodes: &[(usize, u64)],
        next: usize,
        ssa: &mut Vec<Vec<usize>>,
        sets: &mut Vec<u64>,
        seen: &mut BTreeSet<Vec<u64>>,
        out: &mut Vec<Vec<Vec<usize>>>,
    ) {
        if nodes.len() == 1 {
            let mut key = sets.clone();
            key.sort_unstable();
            if seen.insert(key) {
                out.push(ssa.clone());
            }
            return;
        }
        for i in 0..nodes.len() {
            for j in i + 1..nodes.len() {
                let (a, b) = (nodes[i], nodes[j]);
                let mut rest: Vec<(usize, u64)> = nodes
                    .iter()
                    .enumerate()
                    .filter(|&(k, _)| k != i && k != j)
                    .map(|(_, &x)| x)
                    .collect();
                rest.push((next, a.1 | b.1));
                ssa.push(vec![a.0, b.0]);
                sets.push(a.1 | b.1);
                walk(&rest, next + 1, ssa, sets, seen, out);
                ssa.pop();
                sets.pop();
            }
        }
    }
    let nodes: Vec<(usize, u64)> = (0..n).map(|k| (k, 1u64 << k)).collect();
    let mut out = Vec::new();
    walk(
        &nodes,
        n,
        &mut Vec::new(),
        &mut Vec::new(),
        &mut BTreeSet::new(),
        &mut out,
    );
    out
}

/// The `k` cheapest trees of `einsum` by FLOPs whose FLOPs are within `factor` of the
/// cheapest, cheapest first (ties in enumeration order). The path search's own tree under
/// `opts` always comes first; every tree honours `opts.memory_limit`.
pub fn cheapest(
    einsum: &ParsedEinsum,
    opts: &PathOptions,
    k: usize,
    factor: f64,
) -> Result<Vec<PathInfo>, PathError> {
    let first = optimize(einsum, opts)?;
    let n = einsum.num_inputs();
    let mut pool: Vec<PathInfo> = Vec::new();
    if (3..=ENUMERATE_MAX_OPERANDS).contains(&n) {
        for ssa in all_trees(n) {
            let tree = tree_from_ssa(einsum, &ssa)?;
            pool.push(evaluate(einsum, tree, &Flops, "enumerated"));
        }
    } else if n > ENUMERATE_MAX_OPERANDS {
        for (s, max) in STRATEGIES {
            if n > max {
                continue;
            }
            let o = PathOptions {
                strategy: s.into(),
                memory_limit: opts.memory_limit,
                ..PathOptions::default()
            };
            pool.push(optimize(einsum, &o)?);
        }
    }
    let fits = |p: &PathInfo| {
        opts.memory_limit
            .is_none_or(|l| p.largest_intermediate.as_f64() <= l as f64)
            && !p.tree.has_multi_operand_step()
    };
    pool.retain(|p| fits(p));
    pool.sort_by(|a, b| a.flops.as_f64().total_cmp(&b.flops.as_f64()));
    let best = pool
        .first()
        .map_or(first.flops.as_f64(), |p| p.flops.as_f64())
        .min(first.flops.as_f64());
    let mut out = vec![first];
    for p in pool {
        if out.len() >= k.max(1) || p.flops.as_f64() > best * factor {
            break;
        }
        if out.iter().all(|q| q.path != p.path) {
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tree_once() {
        // (2n-3)!! pairwise trees of n leaves.
        assert_eq!(all_trees(3).len(), 3);
        assert_eq!(all_trees(4).len(), 15);
        assert_eq!(all_trees(5).len(), 105);
    }
}
