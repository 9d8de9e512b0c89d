//! Fusion partitions of a contraction tree's steps and the search for the cheapest.
//!
//! A partition cuts the steps into connected groups; only the edge from a step that sums no
//! index into its consumer may stay inside a group. A partition costs the sum of its groups'
//! bounds plus, for every intermediate that crosses between groups, one write and one read.

use crate::{bound_group, check_memory, Access, FusedGroup, Fusion, Sdg, SoapError};
use deinsum_expr::Index;
use deinsum_path::{ContractionTree, StepId};
use std::collections::BTreeMap;

/// At most this many fusable edges: enumerate every partition.
const EXHAUSTIVE_MAX_EDGES: usize = 12;
/// Groups of the dynamic program have at most this many steps.
const DP_MAX_GROUP_STEPS: usize = 16;
/// At most this many candidate groups rooted at one step (the smallest are kept): the DP is
/// exact unless a step roots more connected groups of non-summing steps than this.
const DP_MAX_ROOTED: usize = 1024;

/// How to search the partitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SearchMode {
    /// Exhaustive for at most 12 fusable edges, dynamic programming above.
    #[default]
    Auto,
    /// Every partition (2^edges; errors above 20 fusable edges).
    Exhaustive,
    /// Dynamic programming over the tree: exact among groups of at most 16 steps, unless some
    /// step roots more than 1024 candidate groups (then the smallest are kept).
    Dp,
}

/// A fusion partition: its groups (each the sorted list of its steps, groups in execution
/// order) and its total cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Partition {
    /// The groups.
    pub groups: Vec<Vec<usize>>,
    /// Sum of the groups' Q plus the traffic of the intermediates that cross between groups.
    pub q_total: f64,
}

/// Chooses the fusion partition of `tree` with the least total I/O for fast memory `s`.
pub fn analyze(tree: &ContractionTree, s: f64) -> Result<Fusion, SoapError> {
    analyze_with(tree, s, SearchMode::Auto).map(|(f, _)| f)
}

/// [`analyze`] with an explicit search, also returning the runner-up partition.
pub fn analyze_with(
    tree: &ContractionTree,
    s: f64,
    mode: SearchMode,
) -> Result<(Fusion, Option<Partition>), SoapError> {
    check_memory(s)?;
    let sdg = Sdg::new(tree)?;
    let mut ctx = Ctx {
        tree,
        sdg: &sdg,
        s,
        cache: BTreeMap::new(),
    };
    let fusable = (0..sdg.num_steps()).filter(|&c| sdg.fusable(c)).count();
    let exhaustive = match mode {
        SearchMode::Auto => fusable <= EXHAUSTIVE_MAX_EDGES,
        SearchMode::Exhaustive => {
            if fusable > 20 {
                return Err(SoapError::InvalidTree(format!(
                    "{fusable} fusable steps are too many to enumerate every partition"
                )));
            }
            true
        }
        SearchMode::Dp => false,
    };
    let top = if exhaustive {
        ctx.exhaustive()?
    } else {
        ctx.dp()?
    };
    let best = top[0].clone();
    let runner = top.get(1).cloned();
    let mut groups = Vec::new();
    for g in &best.groups {
        groups.push(ctx.group(g)?.clone());
    }
    let fusion = Fusion {
        groups,
        q_total: best.q_total,
        runner_up_q: runner.as_ref().map(|p| p.q_total),
    };
    Ok((fusion, runner))
}

/// The intermediate traffic of a partition: `2 |T|` for every step result consumed outside
/// its own group.
fn crossing(tree: &ContractionTree, sdg: &Sdg, group_of: &[usize]) -> f64 {
    (0..sdg.num_steps())
        .filter_map(|c| sdg.consumer(c).map(|p| (c, p)))
        .filter(|&(c, p)| group_of[c] != group_of[p])
        .map(|(c, _)| 2.0 * out_size(tree, c))
        .sum()
}

fn out_size(tree: &ContractionTree, step: usize) -> f64 {
    tree.steps[step]
        .output
        .iter()
        .map(|c| tree.extents.get(c).copied().unwrap_or(1) as f64)
        .product()
}

struct Ctx<'a> {
    tree: &'a ContractionTree,
    sdg: &'a Sdg,
    s: f64,
    cache: BTreeMap<Vec<usize>, FusedGroup>,
}

impl Ctx<'_> {
    /// The fused group of a sorted, connected set of steps (cached).
    fn group(&mut self, steps: &[usize]) -> Result<&FusedGroup, SoapError> {
        if !self.cache.contains_key(steps) {
            let g = build_group(self.tree, steps, self.s)?;
            self.cache.insert(steps.to_vec(), g);
        }
        Ok(&self.cache[steps])
    }

    fn cost_of(&mut self, groups: &[Vec<usize>]) -> Result<f64, SoapError> {
        let mut group_of = vec![0; self.sdg.num_steps()];
        let mut q = 0.0;
        for (k, g) in groups.iter().enumerate() {
            for &s in g {
                group_of[s] = k;
            }
            q += self.group(g)?.bound.q;
        }
        Ok(q + crossing(self.tree, self.sdg, &group_of))
    }

    /// Every partition, best first.
    fn exhaustive(&mut self) -> Result<Vec<Partition>, SoapError> {
        let n = self.sdg.num_steps();
        let edges: Vec<usize> = (0..n).filter(|&c| self.sdg.fusable(c)).collect();
        let mut all = Vec::with_capacity(1 << edges.len());
        for mask in 0u32..(1u32 << edges.len()) {
            // A step's group is named by its group's root (the step whose result leaves it).
            let mut root: Vec<usize> = (0..n).collect();
            for s in (0..n).rev() {
                if let Some(k) = edges.iter().position(|&c| c == s) {
                    if mask & (1 << k) != 0 {
                        let p = self.sdg.consumer(s).expect("fusable steps have a consumer");
                        root[s] = root[p];
                    }
                }
            }
            let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
            for (s, &r) in root.iter().enumerate() {
                by_root.entry(r).or_default().push(s);
            }
            let groups: Vec<Vec<usize>> = by_root.into_values().collect();
            let q_total = self.cost_of(&groups)?;
            all.push(Partition { groups, q_total });
        }
        sort_partitions(&mut all);
        all.truncate(2);
        Ok(all)
    }

    /// Dynamic programming over the tree: the two best partitions of every subtree.
    fn dp(&mut self) -> Result<Vec<Partition>, SoapError> {
        let n = self.sdg.num_steps();
        let mut rooted: Vec<Vec<Vec<usize>>> = Vec::with_capacity(n);
        let mut best: Vec<Vec<Partition>> = Vec::with_capacity(n);
        for v in 0..n {
            // Connected groups whose root is v: v plus, per fusable child, nothing or a group
            // rooted there.
            let mut sets: Vec<Vec<usize>> = vec![vec![v]];
            for &c in self.sdg.children(v) {
                if !self.sdg.fusable(c) {
                    continue;
                }
                let mut next = sets.clone();
                for a in &sets {
                    for b in &rooted[c] {
                        if a.len() + b.len() <= DP_MAX_GROUP_STEPS {
                            let mut u = a.clone();
                            u.extend_from_slice(b);
                            next.push(u);
                        }
                    }
                }
                sets = next;
            }
            for set in &mut sets {
                set.sort_unstable();
            }
            if sets.len() > DP_MAX_ROOTED {
                sets.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
                sets.truncate(DP_MAX_ROOTED);
            }
            let mut cands: Vec<Partition> = Vec::new();
            for set in &sets {
                let boundary: Vec<usize> = set
                    .iter()
                    .flat_map(|&u| self.sdg.children(u).iter().copied())
                    .filter(|c| !set.contains(c))
                    .collect();
                let mut q = self.group(set)?.bound.q;
                let mut groups = vec![set.clone()];
                for &c in &boundary {
                    q += 2.0 * out_size(self.tree, c) + best[c][0].q_total;
                    groups.extend(best[c][0].groups.iter().cloned());
                }
                // The second best with this root group swaps one child's best for its second.
                for &c in &boundary {
                    if let Some(second) = best[c].get(1) {
                        let mut g2 = vec![set.clone()];
                        for &d in &boundary {
                            let src = if d == c { second } else { &best[d][0] };
                            g2.extend(src.groups.iter().cloned());
                        }
                        g2.sort_by_key(|g| *g.last().expect("groups are non-empty"));
                        cands.push(Partition {
                            groups: g2,
                            q_total: q - best[c][0].q_total + second.q_total,
                        });
                    }
                }
                groups.sort_by_key(|g| *g.last().expect("groups are non-empty"));
                cands.push(Partition { groups, q_total: q });
            }
            sort_partitions(&mut cands);
            cands.truncate(2);
            best.push(cands);
            rooted.push(sets);
        }
        Ok(best.pop().expect("the tree has steps"))
    }
}

/// Best first; ties broken by the groups (deterministic).
fn sort_partitions(v: &mut [Partition]) {
    v.sort_by(|a, b| {
        a.q_total
            .total_cmp(&b.q_total)
            .then_with(|| a.groups.cmp(&b.groups))
    });
}

/// Builds the fused group of a sorted, connected set of steps and bounds it.
pub(crate) fn build_group(
    tree: &ContractionTree,
    steps: &[usize],
    s: f64,
) -> Result<FusedGroup, SoapError> {
    let internal: Vec<_> = steps.iter().map(|&st| tree.node_of(StepId(st))).collect();
    // External inputs in the order the group reads them: the root's operands in order, an
    // internal operand expanded in place (so the MTTKRP group reads `ijk,ja,ka`).
    let mut inputs: Vec<Access> = Vec::new();
    let last = *steps
        .last()
        .ok_or_else(|| SoapError::InvalidTree("empty group".into()))?;
    let mut stack: Vec<(usize, usize)> = vec![(last, 0)];
    while let Some((st, k)) = stack.pop() {
        let step = &tree.steps[st];
        if k >= step.operands.len() {
            continue;
        }
        stack.push((st, k + 1));
        let op = step.operands[k];
        match tree.step_of(op).filter(|_| internal.contains(&op)) {
            Some(child) => stack.push((child.index(), 0)),
            None => inputs.push(Access {
                node: op.index(),
                indices: step.operand_indices[k].clone(),
            }),
        }
    }
    let root = last;
    // Iteration indices in first appearance along the group's einsum (inputs, then output);
    // every step index occurs in some external input.
    let mut indices: Vec<Index> = Vec::new();
    for c in inputs
        .iter()
        .flat_map(|a| a.indices.iter())
        .chain(&tree.steps[root].output)
    {
        if !indices.contains(c) {
            indices.push(*c);
        }
    }
    for &st in steps {
        for c in tree.steps[st].indices() {
            if !indices.contains(&c) {
                indices.push(c);
            }
        }
    }
    let output = Access {
        node: tree.node_of(StepId(root)).index(),
        indices: tree.steps[root].output.clone(),
    };
    let extents: BTreeMap<Index, usize> = indices
        .iter()
        .map(|c| {
            tree.extents
                .get(c)
                .map(|&n| (*c, n))
                .ok_or(SoapError::MissingExtent(*c))
        })
        .collect::<Result<_, _>>()?;
    let volume = indices.iter().map(|c| extents[c] as f64).product();
    let ins: Vec<Vec<Index>> = inputs.iter().map(|a| a.indices.clone()).collect();
    let bound = bound_group(&indices, &extents, &ins, &output.indices, s)?;
    Ok(FusedGroup {
        steps: steps.to_vec(),
        indices,
        inputs,
        output,
        extents,
        volume,
        bound,
    })
}
