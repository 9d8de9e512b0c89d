//! What the CSV and Parquet readers share with `io`: the user's [`Schema`], each rank's
//! [`share`] of the rows, and the I/O error of a file. A leaf, so `io` and its children
//! both import it without a module circle.

use crate::{DataType, JoinError};
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

/// The balanced share `[lo, hi)` of `n` items that rank `r` of `p` holds.
pub fn share(n: u64, r: usize, p: usize) -> (u64, u64) {
    let f = |q: usize| (n as u128 * q as u128 / p.max(1) as u128) as u64;
    (f(r), f(r + 1))
}

/// The I/O error of `path`.
pub(crate) fn io_err(path: &Path, e: impl std::fmt::Display) -> JoinError {
    JoinError::Io {
        file: path.display().to_string(),
        message: e.to_string(),
    }
}
