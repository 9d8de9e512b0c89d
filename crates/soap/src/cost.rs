//! The SOAP I/O cost as a path-search cost model.

use crate::{bound_group, check_memory, SoapError};
use deinsum_expr::Index;
use deinsum_path::{CostModel, StepShape};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A step's shape as a cache key: operand indices, result indices, extents.
type StepKey = (Vec<Vec<Index>>, Vec<Index>, Vec<(Index, usize)>);

/// Cost of a step = its own (unfused) SOAP I/O bound for fast memory `s`, in words, so that a
/// path search minimises data movement instead of arithmetic.
#[derive(Debug)]
pub struct IoCost {
    s: f64,
    /// Steps recur across a search's candidates; the solve is memoised by shape.
    cache: Mutex<BTreeMap<StepKey, f64>>,
}

impl IoCost {
    /// An I/O cost for `s` words of fast memory.
    pub fn new(s: f64) -> Result<Self, SoapError> {
        check_memory(s)?;
        Ok(IoCost {
            s,
            cache: Mutex::new(BTreeMap::new()),
        })
    }

    /// The fast-memory size.
    pub fn mem(&self) -> f64 {
        self.s
    }
}

impl CostModel for IoCost {
    fn name(&self) -> &str {
        "io"
    }

    fn step_cost(&self, step: &StepShape<'_>) -> f64 {
        let indices = step.indices();
        let ext: Vec<(Index, usize)> = indices
            .iter()
            .map(|c| (*c, step.extents.get(c).copied().unwrap_or(1)))
            .collect();
        let key = (step.inputs.to_vec(), step.output.to_vec(), ext);
        if let Ok(cache) = self.cache.lock() {
            if let Some(&q) = cache.get(&key) {
                return q;
            }
        }
        let extents: BTreeMap<Index, usize> = key.2.iter().copied().collect();
        let q = match bound_group(&indices, &extents, step.inputs, step.output, self.s) {
            Ok(b) => b.q,
            // Unreachable for a validated einsum; the words touched keep the cost finite.
            Err(_) => step.size_of(&indices),
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, q);
        }
        q
    }
}

/// Candidates besides the two searches: this many of the cheapest trees by FLOPs...
const IO_CANDIDATES: usize = 8;
/// ...within this factor of the cheapest.
const IO_FLOPS_FACTOR: f64 = 16.0;

/// The contraction tree of `einsum` with the least total I/O for fast memory `s` *after
/// fusion* ([`crate::analyze`]'s `q_total`), and its fusion. The per-step [`IoCost`] alone
/// misjudges trees whose steps fuse (the fused MTTKRP moves far less than its steps apart), so
/// the candidates are the path search's tree under `opts` (FLOPs by default), the tree the
/// same search finds under [`IoCost`], and the cheapest trees by FLOPs
/// ([`deinsum_path::candidates::cheapest`]); each is fused and bounded and the least total
/// wins, the first candidate on a tie. So the chosen tree never moves more than the path
/// search's own.
pub fn io_optimal(
    einsum: &deinsum_expr::ParsedEinsum,
    opts: &deinsum_path::PathOptions,
    s: f64,
) -> Result<(deinsum_path::PathInfo, crate::Fusion), IoPathError> {
    check_memory(s)?;
    let mut cands =
        deinsum_path::candidates::cheapest(einsum, opts, IO_CANDIDATES, IO_FLOPS_FACTOR)?;
    let io = deinsum_path::PathOptions {
        cost: std::sync::Arc::new(IoCost::new(s)?),
        ..opts.clone()
    };
    let by_io = deinsum_path::optimize(einsum, &io)?;
    if cands.iter().all(|c| c.path != by_io.path) {
        cands.insert(1, by_io);
    }
    let mut best: Option<(deinsum_path::PathInfo, crate::Fusion)> = None;
    for c in cands {
        if c.tree.has_multi_operand_step() {
            continue;
        }
        let f = crate::analyze(&c.tree, s)?;
        if best.as_ref().is_none_or(|(_, b)| f.q_total < b.q_total) {
            best = Some((c, f));
        }
    }
    best.ok_or(IoPathError::NoPairwisePath)
}

/// Why [`io_optimal`] found no tree.
#[derive(Debug, thiserror::Error)]
pub enum IoPathError {
    /// The path search failed.
    #[error(transparent)]
    Path(#[from] deinsum_path::PathError),
    /// The SOAP analysis failed.
    #[error(transparent)]
    Soap(#[from] SoapError),
    /// Every candidate is one step over all operands (a memory limit no pairwise path meets).
    #[error("no pairwise contraction path fits the memory limit")]
    NoPairwisePath,
}
