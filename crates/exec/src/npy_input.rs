//! Reading input blocks from .npy files through the npy reader ([`crate::npy`]).

use crate::Scalar;
use deinsum_expr::Einsum;
use deinsum_plan::Block;
use std::path::Path;

/// Reads operand `k`'s block from `path` (row-major over the operand's distinct indices).
pub(crate) fn read_block<T: Scalar>(
    path: &Path,
    einsum: &Einsum,
    k: usize,
    block: &Block,
) -> Result<Vec<T>, String> {
    crate::npy::read_operand_block::<T>(path, &einsum.inputs[k], &einsum.extents, block)
        .map_err(|e| e.to_string())
}
