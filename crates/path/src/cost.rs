//! Cost models: what a contraction step costs. The searches minimise the sum over steps.

use deinsum_expr::Index;
use std::collections::BTreeMap;

/// The shape of one step as a cost model sees it: the index lists of its operands and of its
/// result (each distinct, in storage order), and the extents.
#[derive(Clone, Copy, Debug)]
pub struct StepShape<'a> {
    /// Distinct indices of each operand (one or two operands).
    pub inputs: &'a [Vec<Index>],
    /// Distinct indices of the result.
    pub output: &'a [Index],
    /// Extent of every index.
    pub extents: &'a BTreeMap<Index, usize>,
}

impl StepShape<'_> {
    /// All distinct indices of the step, in order of first appearance.
    pub fn indices(&self) -> Vec<Index> {
        let mut v: Vec<Index> = Vec::new();
        for c in self.inputs.iter().flatten().chain(self.output.iter()) {
            if !v.contains(c) {
                v.push(*c);
            }
        }
        v
    }

    /// Whether the step sums away some index (one that is in an operand and not the result).
    pub fn sums(&self) -> bool {
        self.inputs
            .iter()
            .flatten()
            .any(|c| !self.output.contains(c))
    }

    /// Product of the extents of `idx` as f64.
    pub fn size_of(&self, idx: &[Index]) -> f64 {
        idx.iter()
            .map(|c| self.extents.get(c).copied().unwrap_or(1) as f64)
            .product()
    }
}

/// Built-in models that the searches evaluate on bit sets without building a [`StepShape`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinCost {
    /// [`Flops`].
    Flops,
    /// [`MultiplyAdds`].
    MultiplyAdds,
}

/// A cost for one contraction step; a path costs the sum of its steps.
///
/// Costs must be non-negative: the exact searches prune on partial sums. Other crates implement
/// this (the SOAP I/O cost lives in `deinsum-soap`) and pass it in [`crate::PathOptions::cost`].
pub trait CostModel: Send + Sync {
    /// A short name, shown in reports (`flops`, `io`, ...).
    fn name(&self) -> &str;

    /// The cost of one step.
    fn step_cost(&self, step: &StepShape<'_>) -> f64;

    /// Lets the searches use a bit-set fast path; must agree with `step_cost`. Custom models
    /// keep the default `None`.
    fn builtin(&self) -> Option<BuiltinCost> {
        None
    }
}

/// opt_einsum's FLOP count: the product of the extents of all the step's indices, times
/// (number of operands − 1, at least 1) + 1 if the step sums away an index.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flops;

impl CostModel for Flops {
    fn name(&self) -> &str {
        "flops"
    }
    fn step_cost(&self, step: &StepShape<'_>) -> f64 {
        let factor = step.inputs.len().saturating_sub(1).max(1) + usize::from(step.sums());
        step.size_of(&step.indices()) * factor as f64
    }
    fn builtin(&self) -> Option<BuiltinCost> {
        Some(BuiltinCost::Flops)
    }
}

/// The plain multiply-add count: the product of the extents of all the step's indices.
#[derive(Clone, Copy, Debug, Default)]
pub struct MultiplyAdds;

impl CostModel for MultiplyAdds {
    fn name(&self) -> &str {
        "multiply-adds"
    }
    fn step_cost(&self, step: &StepShape<'_>) -> f64 {
        step.size_of(&step.indices())
    }
    fn builtin(&self) -> Option<BuiltinCost> {
        Some(BuiltinCost::MultiplyAdds)
    }
}

/// An exact count where it fits in u128, else an f64 approximation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Count {
    /// Exact.
    Exact(u128),
    /// Too large for u128 (or derived from a non-integer model).
    Approx(f64),
}

impl Count {
    /// The value as f64.
    pub fn as_f64(&self) -> f64 {
        match *self {
            // Through u64 when it fits: the same rounding, without the 128-bit conversion's
            // library call (5% of building a path's report).
            Count::Exact(v) => match u64::try_from(v) {
                Ok(w) => w as f64,
                Err(_) => v as f64,
            },
            Count::Approx(v) => v,
        }
    }

    /// The exact value, when there is one.
    pub fn exact(&self) -> Option<u128> {
        match *self {
            Count::Exact(v) => Some(v),
            Count::Approx(_) => None,
        }
    }

    /// Product of the extents of `idx`.
    pub fn size(idx: &[Index], extents: &BTreeMap<Index, usize>) -> Count {
        let mut acc: Option<u128> = Some(1);
        for c in idx {
            let e = extents.get(c).copied().unwrap_or(1) as u128;
            acc = acc.and_then(|a| a.checked_mul(e));
        }
        match acc {
            Some(v) => Count::Exact(v),
            None => Count::Approx(
                idx.iter()
                    .map(|c| extents.get(c).copied().unwrap_or(1) as f64)
                    .product(),
            ),
        }
    }

    /// `self * k`.
    pub fn times(self, k: u128) -> Count {
        match self {
            Count::Exact(v) => v
                .checked_mul(k)
                .map(Count::Exact)
                .unwrap_or(Count::Approx(v as f64 * k as f64)),
            Count::Approx(v) => Count::Approx(v * k as f64),
        }
    }

    /// `self + o`.
    pub fn plus(self, o: Count) -> Count {
        match (self, o) {
            (Count::Exact(a), Count::Exact(b)) => a
                .checked_add(b)
                .map(Count::Exact)
                .unwrap_or(Count::Approx(a as f64 + b as f64)),
            (a, b) => Count::Approx(a.as_f64() + b.as_f64()),
        }
    }

    /// The larger of the two.
    pub fn max(self, o: Count) -> Count {
        match (self, o) {
            (Count::Exact(a), Count::Exact(b)) => Count::Exact(a.max(b)),
            (a, b) => {
                if a.as_f64() >= b.as_f64() {
                    a
                } else {
                    b
                }
            }
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Count::Exact(v) => write!(f, "{v}"),
            Count::Approx(v) => write!(f, "{v:.6e}"),
        }
    }
}

impl serde::Serialize for Count {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Count::Exact(v) => match u64::try_from(v) {
                Ok(small) => s.serialize_u64(small),
                Err(_) => s.serialize_u128(v),
            },
            Count::Approx(v) => s.serialize_f64(v),
        }
    }
}
