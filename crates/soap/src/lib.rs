//! SOAP I/O lower bounds and SDG fusion.
//!
//! [`Fusion`] cuts a [`deinsum_path::ContractionTree`]'s steps into [`FusedGroup`]s; each group
//! is one statement over the union of its indices with an [`IoBound`] for a fast memory of S
//! words.
//!
//! The model (Kwasniewski et al., SOAP; Deinsum SC'22): a statement over iteration indices `V`
//! reads access sets `A_j` (each a set of indices). For a tile `t` (`1 <= t_v <= extent_v`) the
//! dominator size is `D(t) = sum_j prod_{v in A_j} t_v`, `chi(X) = max prod_v t_v` subject to
//! `D(t) <= X`, and any schedule on a fast memory of `S` words moves at least
//! `|V| (X - S) / chi(X)` words for every `X > S`. The bound takes the best `X`:
//! `rho = min_{S < X <= D(extents)} chi(X) / (X - S)` (reached at `X0`), `Q >= |V| / rho`. The
//! access sets of a fused group are its external inputs, plus its output when the group sums an
//! index (it accumulates into it). Solved numerically in log space for any access pattern
//! (see [`Statement`]).

use deinsum_expr::Index;
use std::collections::BTreeMap;

mod cost;
mod fusion;
mod sdg;
mod solver;

pub use cost::{io_optimal, IoCost, IoPathError};
pub use fusion::{analyze, analyze_with, Partition, SearchMode};
pub use sdg::{Sdg, SdgEdge, SdgNode};

/// A tensor accessed by a fused group: a tree node id and its indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Node id in the contraction tree (an input, or a step result).
    pub node: usize,
    /// Its distinct indices, in storage order.
    pub indices: Vec<Index>,
}

/// The SOAP bound of one statement for fast memory S.
#[derive(Clone, Debug, PartialEq)]
pub struct IoBound {
    /// Computational intensity: at most rho new multiply-adds per word moved; `|V| / q`
    /// (the SOAP `min_X chi(X)/(X - S)` whenever that term binds, see [`bound_group`]).
    pub rho: f64,
    /// The dominator size X0 at which rho is reached.
    pub x0: f64,
    /// The optimal tile side per index (real-valued, 1 <= t_v <= extent_v).
    pub tile: BTreeMap<Index, f64>,
    /// The I/O lower bound Q >= |V| / rho, in words.
    pub q: f64,
}

/// A connected group of tree steps fused into one statement.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedGroup {
    /// Indices into the tree's steps, in execution order.
    pub steps: Vec<usize>,
    /// The group's iteration space: union of its steps' indices, in first-appearance order
    /// along the group's einsum ([`FusedGroup::einsum_string`]: inputs, then output).
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
#[derive(Clone, Debug, PartialEq)]
pub struct Fusion {
    /// The groups in execution order.
    pub groups: Vec<FusedGroup>,
    /// Total Q: the groups' `bound.q` plus `2 |T|` for every intermediate T that crosses
    /// between groups (written once by its producer, read once by its consumer).
    pub q_total: f64,
    /// Total Q of the best partition that differs from the chosen one, if any.
    pub runner_up_q: Option<f64>,
}

/// Errors of the SOAP analysis (all caused by the caller's input).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SoapError {
    /// S must be a positive, finite number of words.
    #[error("fast memory size must be a positive finite number of words, got {0}")]
    InvalidMemory(f64),
    /// An index has no extent.
    #[error("index '{0}' has no extent")]
    MissingExtent(Index),
    /// An index has extent 0 (the iteration space is empty).
    #[error("index '{0}' has extent 0")]
    ZeroExtent(Index),
    /// An access set names an index that is not an index of the statement.
    #[error("access set names index '{0}', which is not an index of the statement")]
    UnknownIndex(Index),
    /// The contraction tree is malformed.
    #[error("invalid contraction tree: {0}")]
    InvalidTree(String),
}

/// One SOAP statement: its iteration indices with extents and its access sets.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    /// The iteration indices (distinct).
    pub indices: Vec<Index>,
    /// Extent of every index.
    pub extents: BTreeMap<Index, usize>,
    /// The access sets, each a set of indices of the statement (one per tensor in `D`).
    pub accesses: Vec<Vec<Index>>,
}

/// The raw SOAP solution of a [`Statement`] for one fast-memory size.
#[derive(Clone, Debug, PartialEq)]
pub struct SoapSolution {
    /// `chi(X0) / (X0 - S)`; `f64::INFINITY` when the whole statement fits (`D(extents) <= S`).
    pub rho: f64,
    /// The maximising dominator size.
    pub x0: f64,
    /// `chi(X0)`.
    pub chi: f64,
    /// The tile at X0, per index.
    pub tile: BTreeMap<Index, f64>,
}

impl Statement {
    /// Checks and builds a statement (every index has an extent >= 1; accesses use only
    /// statement indices). Duplicated indices are dropped.
    pub fn new(
        indices: &[Index],
        extents: &BTreeMap<Index, usize>,
        accesses: Vec<Vec<Index>>,
    ) -> Result<Self, SoapError> {
        let mut idx: Vec<Index> = Vec::new();
        for &c in indices {
            if !idx.contains(&c) {
                idx.push(c);
            }
        }
        let mut ext = BTreeMap::new();
        for &c in &idx {
            match extents.get(&c) {
                None => return Err(SoapError::MissingExtent(c)),
                Some(0) => return Err(SoapError::ZeroExtent(c)),
                Some(&n) => {
                    ext.insert(c, n);
                }
            }
        }
        for a in &accesses {
            if let Some(&c) = a.iter().find(|c| !idx.contains(c)) {
                return Err(SoapError::UnknownIndex(c));
            }
        }
        Ok(Statement {
            indices: idx,
            extents: ext,
            accesses,
        })
    }

    /// |V|: the product of the extents.
    pub fn volume(&self) -> f64 {
        self.indices
            .iter()
            .map(|c| self.extents[c] as f64)
            .product()
    }

    /// `D(t)` for a tile (indices missing from `tile` count as side 1).
    pub fn dominator(&self, tile: &BTreeMap<Index, f64>) -> f64 {
        self.accesses
            .iter()
            .map(|a| {
                a.iter()
                    .map(|c| tile.get(c).copied().unwrap_or(1.0))
                    .product::<f64>()
            })
            .sum()
    }

    /// The program over the non-trivial indices, and those indices.
    fn program(&self) -> (solver::Program, Vec<Index>) {
        let vars: Vec<Index> = self
            .indices
            .iter()
            .copied()
            .filter(|c| self.extents[c] > 1)
            .collect();
        let hi = vars.iter().map(|c| (self.extents[c] as f64).ln()).collect();
        let mono = self
            .accesses
            .iter()
            .map(|a| {
                let mut m: Vec<usize> = Vec::new();
                for c in a {
                    if let Some(p) = vars.iter().position(|v| v == c) {
                        if !m.contains(&p) {
                            m.push(p);
                        }
                    }
                }
                m
            })
            .collect();
        (solver::Program::new(hi, mono), vars)
    }

    /// Tile map from log sides (trivial indices get side 1).
    fn tile_of(&self, vars: &[Index], y: &[f64]) -> BTreeMap<Index, f64> {
        let mut t: BTreeMap<Index, f64> = self.indices.iter().map(|&c| (c, 1.0)).collect();
        for (c, v) in vars.iter().zip(y) {
            // Snap sides within the solver's tolerance (the 1e-9 proximal term) onto their
            // extent, so a saturated side equals its extent exactly.
            let n = self.extents[c] as f64;
            let side = v.exp();
            t.insert(
                *c,
                if side >= n * (1.0 - 1e-7) {
                    n
                } else {
                    side.max(1.0)
                },
            );
        }
        t
    }

    /// `chi(X)` and its maximising tile: `X` below `D(1..1)` gives the all-ones tile, `X` above
    /// `D(extents)` the full extents.
    pub fn chi(&self, x: f64) -> (f64, BTreeMap<Index, f64>) {
        let (prog, vars) = self.program();
        let y = prog.y_for_x(x);
        let t = self.tile_of(&vars, &y);
        (t.values().product(), t)
    }

    /// Solves `rho = min_{S < X <= D(extents)} chi(X)/(X - S)`.
    pub fn soap(&self, s: f64) -> Result<SoapSolution, SoapError> {
        check_memory(s)?;
        let (prog, vars) = self.program();
        let sol = prog.solve(s);
        let tile = self.tile_of(&vars, &sol.y);
        let chi = tile.values().product();
        Ok(SoapSolution {
            rho: sol.rho,
            x0: sol.x0,
            chi,
            tile,
        })
    }

    /// The memory-independent per-rank dominator for `p` ranks: the `X` with
    /// `p * chi(X) = |V|` (`D(extents)` for one rank).
    pub fn memory_independent(&self, p: usize) -> f64 {
        let (prog, _) = self.program();
        let target = (self.volume() / p.max(1) as f64).ln();
        prog.x_for_lnchi(target)
    }
}

fn check_memory(s: f64) -> Result<(), SoapError> {
    if s.is_finite() && s > 0.0 {
        Ok(())
    } else {
        Err(SoapError::InvalidMemory(s))
    }
}

/// Whether a statement over `indices` producing `output` sums an index (accumulates).
fn accumulates(indices: &[Index], output: &[Index]) -> bool {
    indices.iter().any(|c| !output.contains(c))
}

fn size_of(idx: &[Index], extents: &BTreeMap<Index, usize>) -> f64 {
    idx.iter()
        .map(|c| extents.get(c).copied().unwrap_or(1) as f64)
        .product()
}

/// The I/O bound of one statement that reads `inputs` and writes `output`.
///
/// The access sets are the inputs, plus the output when the statement sums an index. The
/// bound is `Q = max(|V| / rho_SOAP, footprint)`, where the footprint (every input read once,
/// the output written once) is the cold-start floor that rules when the statement nearly fits
/// in S; the reported `rho` is `|V| / Q`, the SOAP intensity whenever the SOAP term binds.
pub fn bound_group(
    indices: &[Index],
    extents: &BTreeMap<Index, usize>,
    inputs: &[Vec<Index>],
    output: &[Index],
    s: f64,
) -> Result<IoBound, SoapError> {
    let mut accesses: Vec<Vec<Index>> = inputs.to_vec();
    if accumulates(indices, output) {
        accesses.push(output.to_vec());
    }
    let st = Statement::new(indices, extents, accesses)?;
    if let Some(&c) = output.iter().find(|c| !st.indices.contains(c)) {
        return Err(SoapError::UnknownIndex(c));
    }
    let sol = st.soap(s)?;
    let volume = st.volume();
    let footprint: f64 =
        inputs.iter().map(|a| size_of(a, extents)).sum::<f64>() + size_of(output, extents);
    let q_soap = if sol.rho.is_finite() {
        volume / sol.rho
    } else {
        0.0
    };
    let q = q_soap.max(footprint);
    Ok(IoBound {
        rho: volume / q,
        x0: sol.x0,
        tile: sol.tile,
        q,
    })
}

impl FusedGroup {
    /// The group's SOAP statement (access sets as in [`bound_group`]).
    pub fn statement(&self) -> Result<Statement, SoapError> {
        let mut accesses: Vec<Vec<Index>> = self.inputs.iter().map(|a| a.indices.clone()).collect();
        if self.sums() {
            accesses.push(self.output.indices.clone());
        }
        Statement::new(&self.indices, &self.extents, accesses)
    }

    /// Whether the group sums an index (and so accumulates into its output).
    pub fn sums(&self) -> bool {
        accumulates(&self.indices, &self.output.indices)
    }

    /// Words of the group's output tensor.
    pub fn output_size(&self) -> f64 {
        size_of(&self.output.indices, &self.extents)
    }
}

/// Per-rank lower bounds for P ranks, in words.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParallelBound {
    /// The dominator size X with `P * chi(X) = |V|`: what a rank must touch to do its share
    /// of the iterations, whatever its memory (matrix product: `3 (IJK/P)^(2/3)`).
    pub memory_independent: f64,
    /// `|V| / (P rho)` with rho for fast memory S: the share of the sequential bound.
    pub memory_dependent: f64,
}

impl ParallelBound {
    /// The binding (larger) bound.
    pub fn binding(&self) -> f64 {
        self.memory_independent.max(self.memory_dependent)
    }

    /// Which bound binds: `"memory_independent"` or `"memory_dependent"`.
    pub fn binds(&self) -> &'static str {
        if self.memory_dependent > self.memory_independent {
            "memory_dependent"
        } else {
            "memory_independent"
        }
    }
}

/// Both per-rank bounds of `group` for `p` ranks of `s` words each.
///
/// `p = 0` counts as one rank. A group that is not a valid statement (it cannot come from
/// [`analyze`]) or an invalid `s` gives 0 for the bound that cannot be computed; use
/// [`try_parallel_bound`] to get the error instead.
pub fn parallel_bound(group: &FusedGroup, p: usize, s: f64) -> ParallelBound {
    match try_parallel_bound(group, p, s) {
        Ok(b) => b,
        Err(_) => ParallelBound {
            memory_independent: group
                .statement()
                .map(|st| st.memory_independent(p))
                .unwrap_or(0.0),
            memory_dependent: 0.0,
        },
    }
}

/// [`parallel_bound`] with errors.
pub fn try_parallel_bound(
    group: &FusedGroup,
    p: usize,
    s: f64,
) -> Result<ParallelBound, SoapError> {
    let st = group.statement()?;
    let inputs: Vec<Vec<Index>> = group.inputs.iter().map(|a| a.indices.clone()).collect();
    let b = bound_group(
        &group.indices,
        &group.extents,
        &inputs,
        &group.output.indices,
        s,
    )?;
    let p = p.max(1);
    Ok(ParallelBound {
        memory_independent: st.memory_independent(p),
        memory_dependent: b.q / p as f64,
    })
}
