//! Where the two tables are on the ranks (`--placement`): split by rows over every rank (the
//! default), each table on its own group of ranks, or split by columns (the key columns on one
//! group, the other columns on another). A rank reads only its share of what its group holds,
//! so a placement is a way of reading the files, and the strategies start from it.

use crate::io::share;
use crate::{JoinError, Table};
use serde::Serialize;
use std::ops::Range;

/// A layout of the two tables over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Both tables' rows split over every rank.
    Rows,
    /// The left table's rows on the first ⌈P/2⌉ ranks, the right's on the others: the
    /// semi-join's setting (keys go one way, only matching rows come back), though every
    /// row strategy runs on it.
    Separate,
    /// Both tables' key columns on the first ⌈P/2⌉ ranks, their other columns on the others,
    /// each group holding a share of the rows in rank order: joined by the join index alone (only
    /// row numbers move until the output's rows are known; [`crate::columns`]).
    Columns,
}

impl Placement {
    /// Its name (`rows`, `separate`, `columns`).
    pub fn name(self) -> &'static str {
        match self {
            Placement::Rows => "rows",
            Placement::Separate => "separate",
            Placement::Columns => "columns",
        }
    }

    /// The placement of a name.
    pub fn from_name(s: &str) -> Result<Placement, JoinError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "rows" => Placement::Rows,
            "separate" | "groups" | "tables" => Placement::Separate,
            "columns" | "cols" => Placement::Columns,
            _ => {
                return Err(JoinError::Invalid(format!(
                    "--placement must be one of rows, separate, columns, got `{s}`"
                )))
            }
        })
    }

    /// The two groups of `p` ranks: every rank twice (rows), the left's and the right's
    /// (separate), the key columns' and the other columns' (columns). One rank is both.
    pub fn groups(self, p: usize) -> (Range<usize>, Range<usize>) {
        let a = p.div_ceil(2);
        match self {
            Placement::Rows => (0..p, 0..p),
            _ if p <= 1 => (0..p, 0..p),
            _ => (0..a, a..p),
        }
    }

    /// The share of a table's rows that `rank` of `p` reads, as (index, count) of
    /// [`share`]; `None` for none. `left`: of the left table. Under [`Placement::Columns`] a
    /// rank reads its group's share of both tables (and keeps its group's columns).
    pub fn slice(self, left: bool, rank: usize, p: usize) -> Option<(usize, usize)> {
        let (a, b) = self.groups(p);
        let g = match self {
            Placement::Rows => a,
            Placement::Separate if left => a,
            Placement::Separate => b,
            Placement::Columns if a.contains(&rank) => a,
            Placement::Columns => b,
        };
        g.contains(&rank).then(|| (rank - g.start, g.len()))
    }
}

/// The rows of `t` in `slice` (share `i` of `n`, as [`Placement::slice`] gives), or none:
/// what a rank reads of a table already in memory.
pub fn part_of(t: &Table, slice: Option<(usize, usize)>) -> Table {
    let (lo, hi) = slice.map_or((0, 0), |(i, n)| share(t.rows() as u64, i, n));
    t.take_rows(&(lo as usize..hi as usize).collect::<Vec<_>>())
}
