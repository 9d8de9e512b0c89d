//! Contraction trees and the search for a cheap one.
//!
//! A [`ContractionTree`] is a sequence of steps: pairwise, single-operand (summing out of an
//! input the indices only it has, as opt_einsum's paths may), or, when no pairwise path keeps
//! within a memory limit, opt_einsum's single step over every operand. Node ids ([`NodeId`])
//! `0..num_inputs` are the einsum's inputs; step `s` ([`StepId`]) produces node
//! [`ContractionTree::node_of`]`(s)`. The last step's output indices equal the einsum's output, in order.

//!
//! [`optimize`] runs a search strategy chosen by name ([`strategy()`], from the one table
//! [`STRATEGIES`]: `auto`, `greedy`, `optimal`, `branch-2`, `branch-all`, `branch-1`, `dp`) under a pluggable [`CostModel`] (default: opt_einsum's FLOP count,
//! [`Flops`]) and a memory limit, and reports the tree, opt_einsum's linear path and its costs.

mod bits;
pub mod candidates;
pub mod cost;
mod error;
mod net;
pub mod strategy;

pub use cost::{BuiltinCost, CostModel, Count, Flops, MultiplyAdds, StepShape};
pub use error::PathError;
pub use net::Problem;
pub use strategy::{
    strategy, strategy_list, PathStrategy, SsaPath, StrategyEntry, StrategyKind, STRATEGIES,
    STRATEGY_NAMES,
};

use deinsum_expr::{Index, ParsedEinsum};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A node of a contraction tree: an einsum input (`0..num_inputs`) or the result of a step
/// ([`ContractionTree::node_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub usize);

/// A step of a contraction tree, by its position in [`ContractionTree::steps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepId(pub usize);

impl NodeId {
    /// The node that step `step` produces in a tree over `num_inputs` inputs; for code that
    /// builds a path before its [`ContractionTree`] exists (else [`ContractionTree::node_of`]).
    pub fn of_step(num_inputs: usize, step: StepId) -> NodeId {
        NodeId(num_inputs + step.0)
    }

    /// The number itself (the node's position among inputs, then step results).
    pub fn index(self) -> usize {
        self.0
    }
}

impl StepId {
    /// The number itself (the step's position in execution order).
    pub fn index(self) -> usize {
        self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for StepId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One step of a contraction tree: a small einsum over one or two earlier nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Node ids consumed (one, two, or all operands at once for opt_einsum's memory-limit
    /// fallback), each an input or an earlier step's result.
    pub operands: Vec<NodeId>,
    /// Distinct indices of each consumed node, in that node's storage order.
    pub operand_indices: Vec<Vec<Index>>,
    /// Indices of the result, in storage order.
    pub output: Vec<Index>,
}

impl Step {
    /// The step as an einsum string, such as `ja,ka->jka`.
    pub fn einsum_string(&self) -> String {
        // One buffer, no per-operand strings: this runs for every step of every report.
        let len: usize = self.operand_indices.iter().map(|t| t.len() + 1).sum();
        let mut s = String::with_capacity(4 * (len + self.output.len() + 2));
        for (k, t) in self.operand_indices.iter().enumerate() {
            if k > 0 {
                s.push(',');
            }
            s.extend(t.iter());
        }
        s.push_str("->");
        s.extend(self.output.iter());
        s
    }

    /// All distinct indices of the step (its iteration space), in order of first appearance.
    pub fn indices(&self) -> Vec<Index> {
        let mut v = Vec::new();
        for c in self
            .operand_indices
            .iter()
            .flatten()
            .chain(self.output.iter())
        {
            if !v.contains(c) {
                v.push(*c);
            }
        }
        v
    }

    /// Indices summed away by this step (in some operand, not in the output).
    pub fn summed(&self) -> Vec<Index> {
        self.indices()
            .into_iter()
            .filter(|c| !self.output.contains(c))
            .collect()
    }
}

/// A contraction tree over an einsum's inputs (binary, with single-operand steps where they pay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractionTree {
    /// Number of einsum inputs (leaf nodes `0..num_inputs`).
    pub num_inputs: usize,
    /// Distinct indices of each leaf, in storage order.
    pub leaf_indices: Vec<Vec<Index>>,
    /// Steps in execution order; step `s` produces node [`ContractionTree::node_of`]`(s)`.
    pub steps: Vec<Step>,
    /// Extent of every index.
    pub extents: BTreeMap<Index, usize>,
}

impl ContractionTree {
    /// Node id of the final result.
    pub fn root(&self) -> NodeId {
        self.node_of(StepId(self.steps.len() - 1))
    }

    /// The node that step `step` produces.
    pub fn node_of(&self, step: StepId) -> NodeId {
        NodeId::of_step(self.num_inputs, step)
    }

    /// Number of nodes: the inputs, then one result per step.
    pub fn num_nodes(&self) -> usize {
        self.num_inputs + self.steps.len()
    }

    /// The step that produces `node`; `None` for an input (or a node past the last step).
    pub fn step_of(&self, node: NodeId) -> Option<StepId> {
        node.0
            .checked_sub(self.num_inputs)
            .filter(|&s| s < self.steps.len())
            .map(StepId)
    }

    /// Indices of node `id` (an input or a step result).
    pub fn node_indices(&self, id: NodeId) -> &[Index] {
        match self.step_of(id) {
            Some(s) => &self.steps[s.0].output,
            None => &self.leaf_indices[id.0],
        }
    }

    /// The step that consumes node `id`, if any.
    pub fn consumer(&self, id: NodeId) -> Option<StepId> {
        self.steps
            .iter()
            .position(|s| s.operands.contains(&id))
            .map(StepId)
    }
}

impl ContractionTree {
    /// The path in opt_einsum's linear format: each step names positions in the current operand
    /// list, and its result goes to the end of the list.
    pub fn to_linear(&self) -> Vec<Vec<usize>> {
        let mut ids: Vec<NodeId> = (0..self.num_inputs).map(NodeId).collect();
        let mut path = Vec::with_capacity(self.steps.len());
        for (s, step) in self.steps.iter().enumerate() {
            let pos: Vec<usize> = step
                .operands
                .iter()
                .map(|o| {
                    ids.iter()
                        .position(|x| x == o)
                        .expect("tree operands are live")
                })
                .collect();
            ids.retain(|x| !step.operands.contains(x));
            ids.push(self.node_of(StepId(s)));
            path.push(pos);
        }
        path
    }

    /// The path in SSA form (the node ids of every step).
    pub fn to_ssa(&self) -> SsaPath {
        self.steps
            .iter()
            .map(|s| s.operands.iter().map(|o| o.0).collect())
            .collect()
    }

    /// True when some step consumes more than two nodes (opt_einsum's all-at-once fallback
    /// under a memory limit).
    pub fn has_multi_operand_step(&self) -> bool {
        self.steps.iter().any(|s| s.operands.len() > 2)
    }
}

/// How to search: strategy name, memory limit and the cost to minimise.
#[derive(Clone)]
pub struct PathOptions {
    /// Registry name (or alias) of the strategy (see [`STRATEGIES`]); default `auto`.
    pub strategy: String,
    /// Largest allowed step result (intermediate or output), in elements.
    pub memory_limit: Option<u128>,
    /// The cost the search minimises; default [`Flops`].
    pub cost: Arc<dyn CostModel>,
}

impl Default for PathOptions {
    fn default() -> Self {
        PathOptions {
            strategy: "auto".into(),
            memory_limit: None,
            cost: Arc::new(Flops),
        }
    }
}

impl PathOptions {
    /// Default options with strategy `name`.
    pub fn with_strategy(name: &str) -> Self {
        PathOptions {
            strategy: name.into(),
            ..Default::default()
        }
    }
}

impl std::fmt::Debug for PathOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathOptions")
            .field("strategy", &self.strategy)
            .field("memory_limit", &self.memory_limit)
            .field("cost", &self.cost.name())
            .finish()
    }
}

impl PartialEq for PathOptions {
    fn eq(&self, o: &Self) -> bool {
        self.strategy == o.strategy
            && self.memory_limit == o.memory_limit
            && self.cost.name() == o.cost.name()
    }
}

/// One step of a reported path.
#[derive(Clone, Debug, PartialEq)]
pub struct StepInfo {
    /// The step as an einsum, such as `ja,ka->jka`.
    pub einsum: String,
    /// opt_einsum's FLOP count of the step.
    pub flops: Count,
    /// Multiply-adds of the step (product of the extents of its indices).
    pub multiply_adds: Count,
    /// Elements of the step's result.
    pub size: Count,
    /// The step's cost under the search's cost model.
    pub cost: f64,
}

/// A contraction path and what it costs.
#[derive(Clone, Debug, PartialEq)]
pub struct PathInfo {
    /// The strategy that was asked for.
    pub strategy: String,
    /// Name of the cost model the search minimised.
    pub cost_model: String,
    /// The contraction tree.
    pub tree: ContractionTree,
    /// The same path in opt_einsum's linear format.
    pub path: Vec<Vec<usize>>,
    /// Total FLOPs, as `opt_einsum.contract_path(...)[1].opt_cost` counts them.
    pub flops: Count,
    /// Total multiply-adds.
    pub multiply_adds: Count,
    /// Largest step result, in elements (opt_einsum's `largest_intermediate`).
    pub largest_intermediate: Count,
    /// opt_einsum's naive FLOP count (one loop nest over every index).
    pub naive_flops: Count,
    /// Total cost under the cost model.
    pub cost: f64,
    /// Per step, in execution order.
    pub steps: Vec<StepInfo>,
}

impl PathInfo {
    /// Naive FLOPs over optimised FLOPs.
    pub fn speedup(&self) -> f64 {
        self.naive_flops.as_f64() / self.flops.as_f64().max(1.0)
    }
}

/// Checks what a hand-built einsum could get wrong that the searches rely on.
fn validate(e: &ParsedEinsum) -> Result<(), PathError> {
    if e.inputs().is_empty() {
        return Err(PathError::InvalidEinsum("no operands".into()));
    }
    for (i, c) in e.output().iter().enumerate() {
        if e.output()[..i].contains(c) {
            return Err(PathError::InvalidEinsum(format!(
                "index `{c}` twice in the output"
            )));
        }
        if !e.inputs().iter().any(|o| o.indices.contains(c)) {
            return Err(PathError::InvalidEinsum(format!(
                "output index `{c}` is in no operand"
            )));
        }
    }
    Ok(())
}

/// The search problem of `e` under `opts`.
pub fn problem<'a>(e: &'a ParsedEinsum, opts: &'a PathOptions) -> Problem<'a> {
    Problem::new(
        e.inputs().iter().map(|o| o.indices.clone()).collect(),
        e.output().to_vec(),
        e.extents(),
        opts.memory_limit,
        opts.cost.as_ref(),
    )
}

/// Finds a contraction path for `einsum` with the strategy, memory limit and cost of `opts`.
///
/// As opt_einsum does, when no path of pairwise (and single-operand) steps keeps every step
/// result within the memory limit, the path is one step over all operands at once
/// ([`ContractionTree::has_multi_operand_step`]); its result is the output, which may itself
/// exceed the limit.
pub fn optimize(einsum: &ParsedEinsum, opts: &PathOptions) -> Result<PathInfo, PathError> {
    validate(einsum)?;
    let strat = strategy(&opts.strategy)?;
    let all_at_once = || vec![(0..einsum.num_inputs()).collect::<Vec<usize>>()];
    let mut ssa = None;
    if let Some(limit) = opts.memory_limit {
        // The last step makes the output, so no stepwise path fits; skip the search.
        if Count::size(einsum.output(), einsum.extents()).as_f64() > limit as f64 {
            ssa = Some(all_at_once());
        }
    }
    let ssa = match ssa {
        Some(s) => s,
        None => match strat.search(&problem(einsum, opts)) {
            Ok(s) => s,
            Err(PathError::MemoryLimit { .. }) => all_at_once(),
            Err(e) => return Err(e),
        },
    };
    let tree = tree_from_ssa(einsum, &ssa)?;
    let info = evaluate(einsum, tree, opts.cost.as_ref(), &opts.strategy);
    if let Some(limit) = opts.memory_limit {
        // Every strategy promises this; a breach is a bug, reported rather than hidden.
        if info.largest_intermediate.as_f64() > limit as f64 && info.tree.steps.len() > 1 {
            return Err(PathError::MemoryLimit {
                limit,
                detail: format!(
                    "internal error: {} returned a path over the limit",
                    opts.strategy
                ),
            });
        }
    }
    Ok(info)
}

/// Builds the tree of an SSA path (each step: the node ids it consumes, one or more; inputs are
/// `0..n`, step `s` makes [`NodeId::of_step`]`(n, s)`). Step results keep the indices that the output or a live
/// node needs, in order of first appearance in the einsum; the step that leaves one node
/// yields the output in the einsum's order. A single operand with the empty path gets the one
/// step `[0]`.
pub fn tree_from_ssa(e: &ParsedEinsum, ssa: &[Vec<usize>]) -> Result<ContractionTree, PathError> {
    validate(e)?;
    let n = e.num_inputs();
    let leaf_indices: Vec<Vec<Index>> = e.inputs().iter().map(|o| o.indices.clone()).collect();
    let ids = Ids::of(e);
    let mut steps = Vec::new();
    let single = [vec![0usize]];
    let ssa = if n == 1 && ssa.is_empty() {
        &single[..]
    } else {
        ssa
    };
    let mut live: Vec<Option<Vec<Index>>> = leaf_indices.iter().cloned().map(Some).collect();
    // Holders of each index among live nodes, plus one for the output (never released).
    let mut holders = vec![0usize; ids.len()];
    for c in leaf_indices.iter().flatten().chain(e.output().iter()) {
        holders[ids.get(*c)] += 1;
    }
    let mut seen = vec![false; ids.len()];
    let mut alive = n;
    for (s, nodes) in ssa.iter().enumerate() {
        let bad = |what: String| PathError::InvalidPath(format!("step {s} {nodes:?}: {what}"));
        if nodes.is_empty() {
            return Err(bad("names no operand".into()));
        }
        if (1..nodes.len()).any(|i| nodes[..i].contains(&nodes[i])) {
            return Err(bad("an operand twice".into()));
        }
        let mut taken = Vec::with_capacity(nodes.len());
        for &a in nodes {
            let k = live
                .get_mut(a)
                .and_then(|x| x.take())
                .ok_or_else(|| bad(format!("node {a} is not available")))?;
            taken.push(k);
        }
        alive = alive + 1 - nodes.len();
        for c in taken.iter().flatten() {
            holders[ids.get(*c)] -= 1;
        }
        let output = if alive == 1 {
            e.output().to_vec()
        } else {
            // Keep what the output or another live node still holds, in first-appearance order.
            let mut out: Vec<usize> = Vec::new();
            for c in taken.iter().flatten() {
                let id = ids.get(*c);
                if holders[id] > 0 && !seen[id] {
                    seen[id] = true;
                    out.push(id);
                }
            }
            out.sort_unstable();
            out.iter()
                .map(|&id| {
                    seen[id] = false;
                    ids.chars[id]
                })
                .collect()
        };
        for c in &output {
            holders[ids.get(*c)] += 1;
        }
        steps.push(Step {
            operands: nodes.iter().copied().map(NodeId).collect(),
            operand_indices: taken,
            output: output.clone(),
        });
        live.push(Some(output));
    }
    let left = live.iter().filter(|x| x.is_some()).count();
    if left != 1 {
        return Err(PathError::InvalidPath(format!(
            "the path leaves {left} operands uncontracted"
        )));
    }
    Ok(ContractionTree {
        num_inputs: n,
        leaf_indices,
        steps,
        extents: e.extents().clone(),
    })
}

/// Builds the tree of a path in opt_einsum's linear format (each entry: positions of one or
/// more operands in the current list, whose result goes to the end of the list; `[[0]]` or
/// `[]` for a single operand).
pub fn tree_from_linear(
    e: &ParsedEinsum,
    path: &[Vec<usize>],
) -> Result<ContractionTree, PathError> {
    let n = e.num_inputs();
    let mut ids: Vec<usize> = (0..n).collect();
    let mut ssa = Vec::with_capacity(path.len());
    for (s, p) in path.iter().enumerate() {
        let distinct = (1..p.len()).all(|i| !p[..i].contains(&p[i]));
        if p.is_empty() || !distinct || p.iter().any(|&x| x >= ids.len()) {
            return Err(PathError::InvalidPath(format!(
                "step {s} {p:?} does not name distinct positions among the {} current operands",
                ids.len()
            )));
        }
        ssa.push(p.iter().map(|&x| ids[x]).collect::<Vec<usize>>());
        let mut gone = p.clone();
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for x in gone {
            ids.remove(x);
        }
        ids.push(NodeId::of_step(n, StepId(s)).index());
    }
    tree_from_ssa(e, &ssa)
}

/// Costs of a tree: opt_einsum's FLOPs, multiply-adds, sizes, naive FLOPs and the model's cost.
pub fn evaluate(
    e: &ParsedEinsum,
    tree: ContractionTree,
    model: &dyn CostModel,
    strategy: &str,
) -> PathInfo {
    let mut flops = Count::Exact(0);
    let mut madds = Count::Exact(0);
    let mut largest = Count::Exact(1);
    let mut cost = 0.0;
    let mut steps = Vec::with_capacity(tree.steps.len());
    // Ids from the tree itself, so any well-formed tree can be evaluated.
    let ids = Ids::from_lists(
        tree.leaf_indices
            .iter()
            .flatten()
            .chain(tree.steps.iter().flat_map(|s| s.output.iter())),
    );
    let ext: Vec<u128> = ids
        .chars
        .iter()
        .map(|c| tree.extents.get(c).copied().unwrap_or(1) as u128)
        .collect();
    // The extents as floats once (a 128-bit integer's conversion is a library call, and it
    // ran for every index of every step).
    let extf: Vec<f64> = ext.iter().map(|&e| e as f64).collect();
    let size_of = |idx: &mut dyn Iterator<Item = usize>| -> Count {
        let mut acc = Some(1u128);
        let mut approx = 1f64;
        for id in idx {
            acc = acc.and_then(|a| a.checked_mul(ext[id]));
            approx *= extf[id];
        }
        acc.map(Count::Exact).unwrap_or(Count::Approx(approx))
    };
    let builtin = model.builtin();
    let mut mark = vec![false; ids.len()];
    let mut all: Vec<usize> = Vec::with_capacity(ids.len());
    for step in &tree.steps {
        all.clear();
        for c in step
            .operand_indices
            .iter()
            .flatten()
            .chain(step.output.iter())
        {
            let id = ids.get(*c);
            if !mark[id] {
                mark[id] = true;
                all.push(id);
            }
        }
        for id in &all {
            mark[*id] = false;
        }
        let sums = all.len() > step.output.len();
        let space = size_of(&mut all.iter().copied());
        let factor = step.operands.len().saturating_sub(1).max(1) + usize::from(sums);
        let f = space.times(factor as u128);
        let size = size_of(&mut step.output.iter().map(|c| ids.get(*c)));
        let c = match builtin {
            Some(BuiltinCost::Flops) => f.as_f64(),
            Some(BuiltinCost::MultiplyAdds) => space.as_f64(),
            None => model.step_cost(&StepShape {
                inputs: &step.operand_indices,
                output: &step.output,
                extents: &tree.extents,
            }),
        };
        flops = flops.plus(f);
        madds = madds.plus(space);
        largest = largest.max(size);
        cost += c;
        steps.push(StepInfo {
            einsum: step.einsum_string(),
            flops: f,
            multiply_adds: space,
            size,
            cost: c,
        });
    }
    // opt_einsum: one loop nest over every index, (n - 1) multiplies, +1 if anything is shared.
    let all = e.all_indices_of_inputs();
    let total_len: usize = e.inputs().iter().map(|o| o.indices.len()).sum();
    let inner = total_len > all.len();
    let naive = Count::size(&all, &tree.extents)
        .times((e.num_inputs().saturating_sub(1).max(1) + usize::from(inner)) as u128);
    PathInfo {
        strategy: strategy.to_string(),
        cost_model: model.name().to_string(),
        path: tree.to_linear(),
        tree,
        flops,
        multiply_adds: madds,
        largest_intermediate: largest,
        naive_flops: naive,
        cost,
        steps,
    }
}

/// Distinct input indices of an einsum.
trait InputIndices {
    fn all_indices_of_inputs(&self) -> Vec<Index>;
}

impl InputIndices for ParsedEinsum {
    fn all_indices_of_inputs(&self) -> Vec<Index> {
        let mut v: Vec<Index> = Vec::new();
        for c in self.inputs().iter().flat_map(|o| o.indices.iter()) {
            if !v.contains(c) {
                v.push(*c);
            }
        }
        v
    }
}

/// Dense ids of an einsum's indices, in order of first appearance (inputs, then output).
struct Ids {
    ascii: [u32; 128],
    other: bits::FastMap<Index, u32>,
    chars: Vec<Index>,
}

impl Ids {
    fn of(e: &ParsedEinsum) -> Self {
        Ids::from_lists(
            e.inputs()
                .iter()
                .flat_map(|o| o.indices.iter())
                .chain(e.output().iter()),
        )
    }

    fn from_lists<'a>(all: impl Iterator<Item = &'a Index>) -> Self {
        let mut ids = Ids {
            ascii: [u32::MAX; 128],
            other: bits::FastMap::default(),
            chars: Vec::new(),
        };
        for c in all {
            if ids.lookup(*c).is_none() {
                let id = ids.chars.len() as u32;
                if (*c as u32) < 128 {
                    ids.ascii[*c as usize] = id;
                } else {
                    ids.other.insert(*c, id);
                }
                ids.chars.push(*c);
            }
        }
        ids
    }

    fn lookup(&self, c: Index) -> Option<usize> {
        let id = if (c as u32) < 128 {
            self.ascii[c as usize]
        } else {
            *self.other.get(&c)?
        };
        (id != u32::MAX).then_some(id as usize)
    }

    /// Id of an index of the einsum (every step index is one).
    fn get(&self, c: Index) -> usize {
        self.lookup(c).expect("index of the einsum")
    }

    fn len(&self) -> usize {
        self.chars.len()
    }
}
