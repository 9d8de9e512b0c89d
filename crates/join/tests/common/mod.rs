//! Random tables and multiset comparison for the join tests.
#![allow(dead_code)]

use deinsum_join::{Column, Table};

/// splitmix64: a small seeded generator, so the tests need no random crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Key flavours.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    Int,
    Str,
    /// Two key columns (int, string).
    Multi,
}

/// The table pairs every distributed join test runs: (name, left rows, right rows, distinct
/// keys, NULL-key percent): duplicates, few matches, empty sides, one row, only NULL keys.
pub const CASES: [(&str, usize, usize, u64, u64); 6] = [
    ("dups", 40, 25, 8, 10),
    ("sparse matches", 30, 30, 60, 0),
    ("empty left", 0, 12, 5, 10),
    ("empty right", 9, 0, 5, 10),
    ("one row each", 1, 1, 1, 0),
    ("all null keys", 6, 5, 3, 100),
];

/// A random table of `rows` rows: key column(s) `k` (and `k2`) drawn from `distinct` values
/// with `null_pct` percent NULL, and payload columns named with `prefix`.
pub fn table(
    rng: &mut Rng,
    rows: usize,
    keys: Keys,
    distinct: u64,
    null_pct: u64,
    prefix: &str,
) -> Table {
    let mut names = vec!["k".to_string()];
    let mut cols = Vec::new();
    let kv: Vec<Option<u64>> = (0..rows)
        .map(|_| (!rng.chance(null_pct)).then(|| rng.below(distinct)))
        .collect();
    match keys {
        Keys::Int => cols.push(Column::Int64(
            kv.iter().map(|v| v.map(|x| x as i64 - 3)).collect(),
        )),
        Keys::Str | Keys::Multi => cols.push(Column::Utf8(
            kv.iter().map(|v| v.map(|x| format!("key{x}"))).collect(),
        )),
    }
    if let Keys::Multi = keys {
        names.push("k2".into());
        cols.push(Column::Int64(
            (0..rows)
                .map(|_| (!rng.chance(null_pct)).then(|| rng.below(2) as i64))
                .collect(),
        ));
    }
    names.push(format!("{prefix}f"));
    cols.push(Column::Float64(
        (0..rows)
            .map(|_| (!rng.chance(10)).then(|| rng.below(1000) as f64 / 8.0))
            .collect(),
    ));
    names.push(format!("{prefix}s"));
    cols.push(Column::Utf8(
        (0..rows)
            .map(|_| (!rng.chance(10)).then(|| "x".repeat(1 + rng.below(4) as usize)))
            .collect(),
    ));
    names.push("v".into());
    cols.push(Column::Bool(
        (0..rows)
            .map(|_| (!rng.chance(10)).then(|| rng.chance(50)))
            .collect(),
    ));
    Table::new(names, cols).unwrap()
}

/// Rank `r`'s rows of `t` split into `p` balanced row ranges.
pub fn part(t: &Table, r: usize, p: usize) -> Table {
    let n = t.rows();
    let (lo, hi) = (n * r / p, n * (r + 1) / p);
    t.take_rows(&(lo..hi).collect::<Vec<_>>())
}

/// The rows of `t` as sorted strings (a multiset).
pub fn multiset(t: &Table) -> Vec<String> {
    let mut rows: Vec<String> = (0..t.rows())
        .map(|i| {
            t.columns()
                .iter()
                .map(|c| {
                    if c.is_null(i) {
                        "NULL".to_string()
                    } else {
                        c.text(i)
                    }
                })
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    rows.sort();
    rows
}
