//! The plan JSON's form of the upstream types a [`Plan`](crate::Plan) embeds: the parsed
//! einsum, the contraction tree and the fused groups.
//!
//! The schema (docs/plan-schema.md) belongs to this crate, so expr, path and soap carry no
//! serde derives: a change to their in-memory types cannot silently change the plan file, and
//! a plan read back is checked here (an edited einsum or tree is refused by name, not
//! discovered as a panic halfway through a run). Each `*Json` struct mirrors its type field by
//! field, in the order the JSON has always had.

use deinsum_expr::{Dim, Index, Operand, ParsedEinsum};
use deinsum_path::{ContractionTree, NodeId, Step};
use deinsum_soap::{Access, FusedGroup, IoBound};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// One storage dimension (`{"Index": "i"}` or `"Broadcast"`).
#[derive(Serialize, Deserialize)]
enum DimJson {
    Index(Index),
    Broadcast,
}

#[derive(Serialize, Deserialize)]
struct OperandJson {
    dims: Vec<DimJson>,
    indices: Vec<Index>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    named_broadcast: Vec<(usize, Index)>,
}

#[derive(Serialize, Deserialize)]
struct EinsumJson {
    inputs: Vec<OperandJson>,
    output: Vec<Index>,
    extents: BTreeMap<Index, usize>,
    implicit_output: bool,
    ellipsis: Vec<Index>,
}

impl From<&ParsedEinsum> for EinsumJson {
    fn from(e: &ParsedEinsum) -> Self {
        let inputs = e
            .inputs()
            .iter()
            .map(|op| OperandJson {
                dims: op
                    .dims
                    .iter()
                    .map(|d| match d {
                        Dim::Index(c) => DimJson::Index(*c),
                        Dim::Broadcast => DimJson::Broadcast,
                    })
                    .collect(),
                indices: op.indices.clone(),
                named_broadcast: op.named_broadcast.clone(),
            })
            .collect();
        EinsumJson {
            inputs,
            output: e.output().to_vec(),
            extents: e.extents().clone(),
            implicit_output: e.implicit_output(),
            ellipsis: e.ellipsis().to_vec(),
        }
    }
}

impl EinsumJson {
    /// The einsum, with every invariant of [`ParsedEinsum`] checked again.
    fn into_einsum(self) -> Result<ParsedEinsum, String> {
        let inputs = self
            .inputs
            .into_iter()
            .enumerate()
            .map(|(k, op)| {
                let dims = op
                    .dims
                    .into_iter()
                    .map(|d| match d {
                        DimJson::Index(c) => Dim::Index(c),
                        DimJson::Broadcast => Dim::Broadcast,
                    })
                    .collect();
                let mut operand = Operand::new(dims);
                // The index list is derived from the dims; a file that disagrees was edited.
                if operand.indices != op.indices {
                    return Err(format!(
                        "einsum operand {k}: indices {:?} do not match its dims",
                        op.indices.iter().collect::<String>()
                    ));
                }
                operand.named_broadcast = op.named_broadcast;
                Ok(operand)
            })
            .collect::<Result<Vec<_>, String>>()?;
        ParsedEinsum::restore(
            inputs,
            self.output,
            self.extents,
            self.implicit_output,
            self.ellipsis,
        )
        .map_err(|e| format!("einsum: {e}"))
    }
}

#[derive(Serialize, Deserialize)]
struct StepJson {
    operands: Vec<usize>,
    operand_indices: Vec<Vec<Index>>,
    output: Vec<Index>,
}

#[derive(Serialize, Deserialize)]
struct TreeJson {
    num_inputs: usize,
    leaf_indices: Vec<Vec<Index>>,
    steps: Vec<StepJson>,
    extents: BTreeMap<Index, usize>,
}

impl From<&ContractionTree> for TreeJson {
    fn from(t: &ContractionTree) -> Self {
        TreeJson {
            num_inputs: t.num_inputs,
            leaf_indices: t.leaf_indices.clone(),
            steps: t
                .steps
                .iter()
                .map(|s| StepJson {
                    operands: s.operands.iter().map(|n| n.index()).collect(),
                    operand_indices: s.operand_indices.clone(),
                    output: s.output.clone(),
                })
                .collect(),
            extents: t.extents.clone(),
        }
    }
}

impl TreeJson {
    /// The tree, refusing one whose steps read nodes that do not exist yet.
    fn into_tree(self) -> Result<ContractionTree, String> {
        if self.leaf_indices.len() != self.num_inputs {
            return Err(format!(
                "tree: {} leaf index lists for {} inputs",
                self.leaf_indices.len(),
                self.num_inputs
            ));
        }
        if self.steps.is_empty() {
            return Err("tree: no steps".into());
        }
        let mut steps = Vec::with_capacity(self.steps.len());
        for (s, st) in self.steps.into_iter().enumerate() {
            if let Some(bad) = st.operands.iter().find(|&&n| n >= self.num_inputs + s) {
                return Err(format!(
                    "tree: step {s} reads node {bad}, which is not an input or an earlier step"
                ));
            }
            if st.operand_indices.len() != st.operands.len() {
                return Err(format!(
                    "tree: step {s} has {} operands but {} index lists",
                    st.operands.len(),
                    st.operand_indices.len()
                ));
            }
            steps.push(Step {
                operands: st.operands.into_iter().map(NodeId).collect(),
                operand_indices: st.operand_indices,
                output: st.output,
            });
        }
        Ok(ContractionTree {
            num_inputs: self.num_inputs,
            leaf_indices: self.leaf_indices,
            steps,
            extents: self.extents,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct AccessJson {
    node: usize,
    indices: Vec<Index>,
}

#[derive(Serialize, Deserialize)]
struct IoBoundJson {
    rho: f64,
    x0: f64,
    tile: BTreeMap<Index, f64>,
    q: f64,
}

#[derive(Serialize, Deserialize)]
struct GroupJson {
    steps: Vec<usize>,
    indices: Vec<Index>,
    inputs: Vec<AccessJson>,
    output: AccessJson,
    extents: BTreeMap<Index, usize>,
    volume: f64,
    bound: IoBoundJson,
}

fn access_json(a: &Access) -> AccessJson {
    AccessJson {
        node: a.node,
        indices: a.indices.clone(),
    }
}

fn access(a: AccessJson) -> Access {
    Access {
        node: a.node,
        indices: a.indices,
    }
}

impl From<&FusedGroup> for GroupJson {
    fn from(g: &FusedGroup) -> Self {
        GroupJson {
            steps: g.steps.clone(),
            indices: g.indices.clone(),
            inputs: g.inputs.iter().map(access_json).collect(),
            output: access_json(&g.output),
            extents: g.extents.clone(),
            volume: g.volume,
            bound: IoBoundJson {
                rho: g.bound.rho,
                x0: g.bound.x0,
                tile: g.bound.tile.clone(),
                q: g.bound.q,
            },
        }
    }
}

impl From<GroupJson> for FusedGroup {
    fn from(g: GroupJson) -> Self {
        FusedGroup {
            steps: g.steps,
            indices: g.indices,
            inputs: g.inputs.into_iter().map(access).collect(),
            output: access(g.output),
            extents: g.extents,
            volume: g.volume,
            bound: IoBound {
                rho: g.bound.rho,
                x0: g.bound.x0,
                tile: g.bound.tile,
                q: g.bound.q,
            },
        }
    }
}

/// `#[serde(with = "schema::einsum")]`: a [`ParsedEinsum`] as the plan writes it.
pub(crate) mod einsum {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(e: &ParsedEinsum, s: S) -> Result<S::Ok, S::Error> {
        EinsumJson::from(e).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ParsedEinsum, D::Error> {
        EinsumJson::deserialize(d)?
            .into_einsum()
            .map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "schema::tree")]`: a [`ContractionTree`] as the plan writes it.
pub(crate) mod tree {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(t: &ContractionTree, s: S) -> Result<S::Ok, S::Error> {
        TreeJson::from(t).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<ContractionTree, D::Error> {
        TreeJson::deserialize(d)?
            .into_tree()
            .map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "schema::group")]`: a [`FusedGroup`] as the plan writes it.
pub(crate) mod group {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(g: &FusedGroup, s: S) -> Result<S::Ok, S::Error> {
        GroupJson::from(g).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<FusedGroup, D::Error> {
        Ok(GroupJson::deserialize(d)?.into())
    }
}
