//! Reading each rank's part of a table and writing a table: CSV and Parquet, chosen by the
//! file's extension (`.parquet`/`.pq` is Parquet, anything else CSV).

mod common;
pub mod csv;
pub mod ipc;
pub mod parquet;

pub use common::{share, Schema};

use crate::{JoinError, Table};
use deinsum_exec::Communicator;
use std::path::Path;

/// Whether `path` names a Parquet file (by its extension).
pub fn is_parquet(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("parquet" | "pq")
    )
}

/// This rank's rows of the table in `path` (collective: the ranks agree on failure, and CSV
/// ranks on the types).
pub fn read_part<C: Communicator>(
    comm: &C,
    path: &Path,
    schema: &Schema,
) -> Result<Table, JoinError> {
    if is_parquet(path) {
        crate::coll::agree(comm, parquet::read_part(comm.rank(), comm.size(), path))
    } else {
        csv::read_part(comm, path, schema)
    }
}

/// Share `i` of `n` of the rows of the table in `path` (`None`: no rows, the columns alone),
/// as a rank of a group reads it (collective over all of `comm`'s ranks, as [`read_part`]).
pub fn read_slice<C: Communicator>(
    comm: &C,
    path: &Path,
    schema: &Schema,
    slice: Option<(usize, usize)>,
) -> Result<Table, JoinError> {
    if is_parquet(path) {
        crate::coll::agree(comm, parquet::read_slice(slice, path))
    } else {
        csv::read_slice(comm, path, schema, slice)
    }
}

/// Writes `table` to `path` (Parquet or CSV by the extension).
pub fn write(path: &Path, table: &Table) -> Result<(), JoinError> {
    if is_parquet(path) {
        parquet::write(path, table)
    } else {
        csv::write(path, table)
    }
}

/// Writes the rows of `parts` (tables of one schema) back to back to `path`, as [`write`]
/// writes their concatenation: Parquet straight from the parts (no copy into one table first).
pub fn write_parts(path: &Path, parts: Vec<Table>) -> Result<(), JoinError> {
    if is_parquet(path) {
        parquet::write_parts(path, parts)
    } else {
        csv::write(
            path,
            &Table::concat_owned(parts).map_err(JoinError::Invalid)?,
        )
    }
}
