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
