//! Reading each rank's part of a table and writing a table: CSV and Parquet, chosen by the
//! file's extension (`.parquet`/`.pq` is Parquet, anything else CSV).

pub mod csv;
pub mod parquet;

use crate::{DataType, JoinError, Table};
use deinsum_exec::Communicator;
use std::path::Path;

/// Column types given by the user (`--schema a:int64,b:string`), by name.
#[derive(Clone, Debug, Default)]
pub struct Schema(pub Vec<(String, DataType)>);

impl Schema {
    /// Reads `NAME:TYPE,...`.
    pub fn parse(s: &str) -> Result<Schema, JoinError> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (n, t) = part
                .rsplit_once(':')
                .ok_or_else(|| JoinError::Schema(s.to_string()))?;
            let t = DataType::from_name(t).ok_or_else(|| JoinError::Schema(s.to_string()))?;
            out.push((n.trim().to_string(), t));
        }
        Ok(Schema(out))
    }

    /// The type given for `name`.
    pub fn get(&self, name: &str) -> Option<DataType> {
        self.0.iter().find(|(n, _)| n == name).map(|&(_, t)| t)
    }
}

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

/// The balanced share `[lo, hi)` of `n` items that rank `r` of `p` holds.
pub fn share(n: u64, r: usize, p: usize) -> (u64, u64) {
    let f = |q: usize| (n as u128 * q as u128 / p.max(1) as u128) as u64;
    (f(r), f(r + 1))
}

/// This rank's rows of the table in `path` (collective: CSV ranks agree on the types).
pub fn read_part<C: Communicator>(
    comm: &C,
    path: &Path,
    schema: &Schema,
) -> Result<Table, JoinError> {
    if is_parquet(path) {
        parquet::read_part(comm.rank(), comm.size(), path)
    } else {
        csv::read_part(comm, path, schema)
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

/// The I/O error of `path`.
pub(crate) fn io_err(path: &Path, e: impl std::fmt::Display) -> JoinError {
    JoinError::Io {
        file: path.display().to_string(),
        message: e.to_string(),
    }
}
