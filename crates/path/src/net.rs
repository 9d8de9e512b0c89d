//! The search problem every strategy receives, and its bit-set form.

use crate::bits::Bits;
use crate::cost::{BuiltinCost, CostModel, StepShape};
use deinsum_expr::Index;
use std::collections::BTreeMap;

/// A contraction path in SSA form: each step names the nodes it consumes (inputs `0..n`, then
/// step results `n, n+1, ...` in order): two for a pairwise step, one for a single-operand
/// reduction, all of them for opt_einsum's one-step fallback; a single-operand problem may
/// have the empty path.
pub type SsaPath = Vec<Vec<usize>>;

/// A path of pairwise steps only, as the pairwise searches build it.
pub(crate) type PairPath = Vec<(usize, usize)>;

/// Most distinct indices a problem may have (the widest bit set is 64 words).
pub const MAX_INDICES: usize = 64 * 64;

/// What every strategy receives: the operands' index sets, the output, the extents, the memory
/// limit and the cost model. Index ids are positions in [`Problem::order`].
pub struct Problem<'a> {
    /// Distinct indices of each input, in storage order.
    pub inputs: Vec<Vec<Index>>,
    /// Output indices.
    pub output: Vec<Index>,
    /// Extent of every index.
    pub extents: &'a BTreeMap<Index, usize>,
    /// Largest allowed step result, in elements (`None`: unlimited).
    pub memory_limit: Option<u128>,
    /// The cost to minimise.
    pub cost: &'a dyn CostModel,
    /// Every index once, in order of first appearance in the inputs (then the output).
    pub order: Vec<Index>,
}

impl<'a> Problem<'a> {
    /// Builds a problem, deriving the index order.
    pub fn new(
        inputs: Vec<Vec<Index>>,
        output: Vec<Index>,
        extents: &'a BTreeMap<Index, usize>,
        memory_limit: Option<u128>,
        cost: &'a dyn CostModel,
    ) -> Self {
        let mut order: Vec<Index> = Vec::new();
        for c in inputs.iter().flatten().chain(output.iter()) {
            if !order.contains(c) {
                order.push(*c);
            }
        }
        Problem {
            inputs,
            output,
            extents,
            memory_limit,
            cost,
            order,
        }
    }

    /// Number of operands.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }
}

/// A [`Problem`] with index sets as bit sets of width `W` words.
pub(crate) struct Net<'p, 'a, const W: usize> {
    pub(crate) p: &'p Problem<'a>,
    /// Extent of each index id as f64.
    pub(crate) ext: Vec<f64>,
    /// Index set of each input.
    pub(crate) inputs: Vec<Bits<W>>,
    /// Output index set.
    pub(crate) output: Bits<W>,
    /// Memory limit as f64 (infinite when unlimited).
    pub(crate) limit: f64,
    builtin: Option<BuiltinCost>,
}

impl<'p, 'a, const W: usize> Net<'p, 'a, W> {
    /// Converts `p`; its index count must be at most `64 * W`.
    pub(crate) fn new(p: &'p Problem<'a>) -> Self {
        let id = |c: &Index| p.order.iter().position(|x| x == c).expect("index in order");
        let set = |v: &[Index]| {
            let mut b = Bits::<W>::EMPTY;
            for c in v {
                b.insert(id(c));
            }
            b
        };
        Net {
            p,
            ext: p
                .order
                .iter()
                .map(|c| p.extents.get(c).copied().unwrap_or(1) as f64)
                .collect(),
            inputs: p.inputs.iter().map(|v| set(v)).collect(),
            output: set(&p.output),
            limit: p.memory_limit.map(|m| m as f64).unwrap_or(f64::INFINITY),
            builtin: p.cost.builtin(),
        }
    }

    /// This net with the indices `drop` taken out of every input (same ids and extents), as
    /// the problem with those indices summed out of their inputs first.
    pub(crate) fn without(&self, drop: Bits<W>) -> Self {
        Net {
            p: self.p,
            ext: self.ext.clone(),
            inputs: self.inputs.iter().map(|k| k.minus(drop)).collect(),
            output: self.output,
            limit: self.limit,
            builtin: self.builtin,
        }
    }

    /// The built-in model behind the cost, if any.
    pub(crate) fn builtin(&self) -> Option<BuiltinCost> {
        self.builtin
    }

    /// Number of operands.
    pub(crate) fn n(&self) -> usize {
        self.inputs.len()
    }

    /// Number of elements of a tensor over `s`.
    pub(crate) fn size(&self, s: Bits<W>) -> f64 {
        s.ones().map(|i| self.ext[i]).product()
    }

    /// Whether a step result over `s` respects the memory limit.
    pub(crate) fn fits(&self, s: Bits<W>) -> bool {
        self.size(s) <= self.limit
    }

    /// The indices of `s` as labels, in order of first appearance.
    pub(crate) fn labels(&self, s: Bits<W>) -> Vec<Index> {
        s.ones().map(|i| self.p.order[i]).collect()
    }

    /// Cost of the pairwise step `a, b -> out` under the problem's model.
    pub(crate) fn step_cost(&self, a: Bits<W>, b: Bits<W>, out: Bits<W>) -> f64 {
        match self.builtin {
            Some(BuiltinCost::Flops) => {
                let all = a | b;
                let factor = if all == out { 1.0 } else { 2.0 };
                self.size(all) * factor
            }
            Some(BuiltinCost::MultiplyAdds) => self.size(a | b),
            None => {
                let inputs = [self.labels(a), self.labels(b)];
                let output = self.labels(out);
                self.p.cost.step_cost(&StepShape {
                    inputs: &inputs,
                    output: &output,
                    extents: self.p.extents,
                })
            }
        }
    }

    /// Cost of a step over any number of operands `ks -> out` (one: a single-operand
    /// reduction; more than two: opt_einsum's all-at-once step) under the problem's model.
    pub(crate) fn nary_cost(&self, ks: &[Bits<W>], out: Bits<W>) -> f64 {
        if let [a, b] = ks {
            return self.step_cost(*a, *b, out);
        }
        let all = ks.iter().fold(Bits::<W>::EMPTY, |m, k| m | *k);
        match self.builtin {
            // opt_einsum's flop_count: max(1, terms - 1) products, plus one if anything is summed.
            Some(BuiltinCost::Flops) => {
                let factor = ks.len().saturating_sub(1).max(1) + usize::from(all != out);
                self.size(all) * factor as f64
            }
            Some(BuiltinCost::MultiplyAdds) => self.size(all),
            None => {
                let inputs: Vec<Vec<Index>> = ks.iter().map(|k| self.labels(*k)).collect();
                let output = self.labels(out);
                self.p.cost.step_cost(&StepShape {
                    inputs: &inputs,
                    output: &output,
                    extents: self.p.extents,
                })
            }
        }
    }

    /// Replays an SSA path (steps of one or more node ids), returning its total cost, or `None`
    /// if some step breaks the limit or names a node that is not available.
    pub(crate) fn path_cost(&self, ssa: &[Vec<usize>]) -> Option<f64> {
        let mut nodes: Vec<Option<Bits<W>>> = self.inputs.iter().map(|b| Some(*b)).collect();
        let mut total = 0.0;
        let mut ks: Vec<Bits<W>> = Vec::new();
        for step in ssa {
            ks.clear();
            for &a in step {
                ks.push(nodes.get_mut(a)?.take()?);
            }
            let mut keep = self.output;
            for k in nodes.iter().flatten() {
                keep = keep | *k;
            }
            let all = ks.iter().fold(Bits::<W>::EMPTY, |m, k| m | *k);
            let out = all & keep;
            if !self.fits(out) {
                return None;
            }
            total += self.nary_cost(&ks, out);
            nodes.push(Some(out));
        }
        Some(total)
    }
}
