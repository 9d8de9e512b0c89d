//! Reading input blocks from .npy files through the npy reader ([`crate::npy`]).

use crate::data::BlockError;
use crate::npy::NpyError;
use crate::Scalar;
use deinsum_expr::ParsedEinsum;
use deinsum_plan::Block;
use std::path::Path;

/// Reads operand `k`'s block from `path` (row-major over the operand's distinct indices).
pub(crate) fn read_block<T: Scalar>(
    path: &Path,
    einsum: &ParsedEinsum,
    k: usize,
    block: &Block,
) -> Result<Vec<T>, BlockError> {
    crate::npy::read_operand_block::<T>(path, &einsum.inputs()[k], einsum.extents(), block).map_err(
        |e| match e {
            NpyError::OutOfMemory(o) => BlockError::OutOfMemory(o),
            other => BlockError::Input(other.to_string()),
        },
    )
}
