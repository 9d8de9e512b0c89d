//! Contraction trees and the search for a cheap one.
//!
//! A [`ContractionTree`] is a sequence of pairwise (or, for a single-operand einsum, unary)
//! steps. Node ids `0..num_inputs` are the einsum's inputs; step `s` produces node
//! `num_inputs + s`. The last step's output indices equal the einsum's output, in order.

use deinsum_expr::Index;
use std::collections::BTreeMap;

/// One step of a contraction tree: a small einsum over one or two earlier nodes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    /// Node ids consumed (one or two), each an input or an earlier step's result.
    pub operands: Vec<usize>,
    /// Distinct indices of each consumed node, in that node's storage order.
    pub operand_indices: Vec<Vec<Index>>,
    /// Indices of the result, in storage order.
    pub output: Vec<Index>,
}

impl Step {
    /// The step as an einsum string, such as `ja,ka->jka`.
    pub fn einsum_string(&self) -> String {
        let ins: Vec<String> = self
            .operand_indices
            .iter()
            .map(|t| t.iter().collect())
            .collect();
        format!("{}->{}", ins.join(","), self.output.iter().collect::<String>())
    }

    /// All distinct indices of the step (its iteration space), in order of first appearance.
    pub fn indices(&self) -> Vec<Index> {
        let mut v = Vec::new();
        for c in self.operand_indices.iter().flatten().chain(self.output.iter()) {
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

/// A binary contraction tree over an einsum's inputs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContractionTree {
    /// Number of einsum inputs (leaf nodes `0..num_inputs`).
    pub num_inputs: usize,
    /// Distinct indices of each leaf, in storage order.
    pub leaf_indices: Vec<Vec<Index>>,
    /// Steps in execution order; step `s` produces node `num_inputs + s`.
    pub steps: Vec<Step>,
    /// Extent of every index.
    pub extents: BTreeMap<Index, usize>,
}

impl ContractionTree {
    /// Node id of the final result.
    pub fn root(&self) -> usize {
        self.num_inputs + self.steps.len() - 1
    }

    /// Indices of node `id` (an input or a step result).
    pub fn node_indices(&self, id: usize) -> &[Index] {
        if id < self.num_inputs {
            &self.leaf_indices[id]
        } else {
            &self.steps[id - self.num_inputs].output
        }
    }

    /// The step that consumes node `id`, if any.
    pub fn consumer(&self, id: usize) -> Option<usize> {
        self.steps.iter().position(|s| s.operands.contains(&id))
    }
}
