//! The symbolic directed graph (SDG) of a contraction tree: a vertex per tensor, an edge per
//! data dependency of a step.

use crate::SoapError;
use deinsum_expr::Index;
use deinsum_path::{ContractionTree, NodeId, StepId};
use petgraph::graph::{DiGraph, NodeIndex};

/// A tensor of the SDG: an einsum input or a step's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdgNode {
    /// The tree node id.
    pub node: usize,
    /// The step that produces it (`None` for an input).
    pub step: Option<usize>,
    /// Its distinct indices.
    pub indices: Vec<Index>,
}

/// A data dependency: `step` reads the source tensor to produce the target tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdgEdge {
    /// The consuming step.
    pub step: usize,
}

/// The SDG of a validated contraction tree.
#[derive(Clone, Debug)]
pub struct Sdg {
    graph: DiGraph<SdgNode, SdgEdge>,
    vertex: Vec<NodeIndex>,
    num_inputs: usize,
    /// Per step: the steps whose results it consumes.
    children: Vec<Vec<usize>>,
    /// Per step: the step consuming its result (`None` for the root).
    consumer: Vec<Option<usize>>,
    /// Per step: whether it sums an index.
    sums: Vec<bool>,
}

impl Sdg {
    /// Validates `tree` and builds its SDG.
    pub fn new(tree: &ContractionTree) -> Result<Self, SoapError> {
        validate(tree)?;
        let mut graph = DiGraph::new();
        let mut vertex = Vec::new();
        for (k, idx) in tree.leaf_indices.iter().enumerate() {
            vertex.push(graph.add_node(SdgNode {
                node: k,
                step: None,
                indices: idx.clone(),
            }));
        }
        let n = tree.steps.len();
        let mut children = vec![Vec::new(); n];
        let mut consumer = vec![None; n];
        for (s, st) in tree.steps.iter().enumerate() {
            let id = tree.node_of(StepId(s)).index();
            let v = graph.add_node(SdgNode {
                node: id,
                step: Some(s),
                indices: st.output.clone(),
            });
            vertex.push(v);
            for &op in &st.operands {
                graph.add_edge(vertex[op.index()], v, SdgEdge { step: s });
                if let Some(child) = tree.step_of(op) {
                    children[s].push(child.index());
                    consumer[child.index()] = Some(s);
                }
            }
        }
        let sums = tree
            .steps
            .iter()
            .map(|st| !st.summed().is_empty())
            .collect();
        Ok(Sdg {
            graph,
            vertex,
            num_inputs: tree.num_inputs,
            children,
            consumer,
            sums,
        })
    }

    /// The underlying petgraph graph.
    pub fn graph(&self) -> &DiGraph<SdgNode, SdgEdge> {
        &self.graph
    }

    /// The graph vertex of tree node `id`.
    pub fn vertex(&self, id: usize) -> NodeIndex {
        self.vertex[id]
    }

    /// Number of steps.
    pub fn num_steps(&self) -> usize {
        self.children.len()
    }

    /// Number of einsum inputs.
    pub fn num_inputs(&self) -> usize {
        self.num_inputs
    }

    /// The steps whose results step `s` consumes.
    pub fn children(&self, s: usize) -> &[usize] {
        &self.children[s]
    }

    /// The step that consumes step `s`'s result (`None` for the last step).
    pub fn consumer(&self, s: usize) -> Option<usize> {
        self.consumer[s]
    }

    /// Whether step `s` may be fused into its consumer: it has one, and it sums no index
    /// (fusing across a reduction would change the arithmetic).
    pub fn fusable(&self, s: usize) -> bool {
        self.consumer[s].is_some() && !self.sums[s]
    }
}

fn validate(tree: &ContractionTree) -> Result<(), SoapError> {
    let bad = |m: String| Err(SoapError::InvalidTree(m));
    if tree.steps.is_empty() {
        return bad("the tree has no steps".into());
    }
    if tree.leaf_indices.len() != tree.num_inputs {
        return bad(format!(
            "{} leaves listed for {} inputs",
            tree.leaf_indices.len(),
            tree.num_inputs
        ));
    }
    let total = tree.num_nodes();
    let mut used = vec![false; total];
    for (s, st) in tree.steps.iter().enumerate() {
        let id: NodeId = tree.node_of(StepId(s));
        if st.operands.is_empty() || st.operands.len() > 2 {
            return bad(format!("step {s} has {} operands", st.operands.len()));
        }
        if st.operand_indices.len() != st.operands.len() {
            return bad(format!(
                "step {s} lists indices for {} operands",
                st.operand_indices.len()
            ));
        }
        for (k, &op) in st.operands.iter().enumerate() {
            if op >= id {
                return bad(format!(
                    "step {s} reads node {op}, which is not computed before it"
                ));
            }
            if used[op.index()] {
                return bad(format!("node {op} is consumed twice"));
            }
            used[op.index()] = true;
            let want = tree.node_indices(op);
            let got = &st.operand_indices[k];
            let same = got.len() == want.len() && got.iter().all(|c| want.contains(c));
            if !same {
                return bad(format!(
                    "step {s} reads node {op} with indices that differ from its own"
                ));
            }
        }
        for (p, c) in st.output.iter().enumerate() {
            if st.output[..p].contains(c) {
                return bad(format!("step {s} repeats output index '{c}'"));
            }
            if !st.operand_indices.iter().flatten().any(|x| x == c) {
                return bad(format!("step {s} outputs index '{c}' that no operand has"));
            }
        }
        for c in st.indices() {
            match tree.extents.get(&c) {
                None => return Err(SoapError::MissingExtent(c)),
                Some(0) => return Err(SoapError::ZeroExtent(c)),
                Some(_) => {}
            }
        }
    }
    if let Some(k) = (0..total - 1).find(|&k| !used[k]) {
        return bad(format!("node {k} is never consumed"));
    }
    Ok(())
}
