//! SOAP I/O lower bounds and SDG fusion.
//!
//! [`Fusion`] cuts a [`deinsum_path::ContractionTree`]'s steps into [`FusedGroup`]s; each group
//! is one statement over the union of its indices with an [`IoBound`] for a fast memory of S
//! words.

use deinsum_expr::Index;
use std::collections::BTreeMap;

/// A tensor accessed by a fused group: a tree node id and its indices.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Access {
    /// Node id in the contraction tree (an input, or a step result).
    pub node: usize,
    /// Its distinct indices, in storage order.
    pub indices: Vec<Index>,
}

/// The SOAP bound of one statement for fast memory S.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IoBound {
    /// Computational intensity: at most rho new multiply-adds per word loaded.
    pub rho: f64,
    /// The dominator size X0 at which rho is reached.
    pub x0: f64,
    /// The optimal tile side per index (real-valued, 1 <= t_v <= extent_v).
    pub tile: BTreeMap<Index, f64>,
    /// The I/O lower bound Q >= |V| / rho, in words.
    pub q: f64,
}

/// A connected group of tree steps fused into one statement.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedGroup {
    /// Indices into the tree's steps, in execution order.
    pub steps: Vec<usize>,
    /// The group's iteration space: union of its steps' indices, in first-appearance order.
    pub indices: Vec<Index>,
    /// Tensors read from outside the group.
    pub inputs: Vec<Access>,
    /// The group's result (the last step's output).
    pub output: Access,
    /// Extent of every index of `indices` (needed to re-solve the bound, e.g. per rank).
    pub extents: BTreeMap<Index, usize>,
    /// |V|: the product of the extents of `indices` (multiply-adds).
    pub volume: f64,
    /// The bound and tile.
    pub bound: IoBound,
}

impl FusedGroup {
    /// The group as an einsum string over its external inputs, such as `ijk,ja,ka->ia`.
    pub fn einsum_string(&self) -> String {
        let ins: Vec<String> = self
            .inputs
            .iter()
            .map(|a| a.indices.iter().collect())
            .collect();
        format!(
            "{}->{}",
            ins.join(","),
            self.output.indices.iter().collect::<String>()
        )
    }
}

/// A fusion partition of a contraction tree, with its total bound.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Fusion {
    /// The groups in execution order.
    pub groups: Vec<FusedGroup>,
    /// Total Q over the groups, counting materialized intermediates.
    pub q_total: f64,
    /// Total Q of the best partition that differs from the chosen one, if any.
    pub runner_up_q: Option<f64>,
}
