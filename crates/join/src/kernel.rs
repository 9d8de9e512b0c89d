//! The local pieces: what a join is (kind, key columns, output columns), keys as bytes, the
//! hash of a key, the hash join of two local tables into a join index, and the assembly of
//! output rows from a join index (late materialization).

use crate::{Column, DataType, JoinError, Table};
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Inner, left, right or full (outer) join.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JoinKind {
    /// Only matching pairs.
    Inner,
    /// Also the left rows without a match.
    Left,
    /// Also the right rows without a match.
    Right,
    /// Also the unmatched rows of both sides.
    Full,
}

impl JoinKind {
    /// Every kind.
    pub const ALL: [JoinKind; 4] = [
        JoinKind::Inner,
        JoinKind::Left,
        JoinKind::Right,
        JoinKind::Full,
    ];

    /// Whether unmatched left rows are kept.
    pub fn keeps_left(self) -> bool {
        matches!(self, JoinKind::Left | JoinKind::Full)
    }

    /// Whether unmatched right rows are kept.
    pub fn keeps_right(self) -> bool {
        matches!(self, JoinKind::Right | JoinKind::Full)
    }

    /// Its name (`inner`, `left`, `right`, `full`).
    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Inner => "inner",
            JoinKind::Left => "left",
            JoinKind::Right => "right",
            JoinKind::Full => "full",
        }
    }

    /// The kind of a name (`outer` for full).
    pub fn from_name(s: &str) -> Result<JoinKind, JoinError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "inner" => JoinKind::Inner,
            "left" => JoinKind::Left,
            "right" => JoinKind::Right,
            "full" | "outer" => JoinKind::Full,
            _ => {
                return Err(JoinError::Invalid(format!(
                    "--how must be one of inner, left, right, full, got `{s}`"
                )))
            }
        })
    }
}

/// A join resolved against the two tables' columns: which columns are keys, which are the
/// rest, and the output's names and types (keys once, then the left's other columns, then
/// the right's; a right name that clashes gets `_1`).
#[derive(Clone, Debug)]
pub struct JoinShape {
    /// The kind.
    pub kind: JoinKind,
    /// Key positions in the left table.
    pub lkeys: Vec<usize>,
    /// Key positions in the right table.
    pub rkeys: Vec<usize>,
    /// The left's other columns.
    pub lrest: Vec<usize>,
    /// The right's other columns.
    pub rrest: Vec<usize>,
    /// Left names and types.
    pub lschema: (Vec<String>, Vec<DataType>),
    /// Right names and types.
    pub rschema: (Vec<String>, Vec<DataType>),
    /// Output names.
    pub names: Vec<String>,
}

impl JoinShape {
    /// Resolves `on` against the left and right tables (`files` name them in errors).
    pub fn new(
        left: &Table,
        right: &Table,
        on: &[String],
        kind: JoinKind,
        files: (&str, &str),
    ) -> Result<JoinShape, JoinError> {
        if on.is_empty() {
            return Err(JoinError::Invalid(
                "--on needs at least one key column".into(),
            ));
        }
        let find = |t: &Table, file: &str, c: &str| {
            t.position(c).ok_or_else(|| JoinError::MissingColumn {
                file: file.to_string(),
                column: c.to_string(),
                available: t.names().join(", "),
            })
        };
        let mut lkeys = Vec::new();
        let mut rkeys = Vec::new();
        for c in on {
            let (l, r) = (find(left, files.0, c)?, find(right, files.1, c)?);
            let (lt, rt) = (left.columns()[l].dtype(), right.columns()[r].dtype());
            if lt != rt && lt != DataType::Null && rt != DataType::Null {
                return Err(JoinError::KeyTypes {
                    column: c.clone(),
                    left: lt.name().into(),
                    left_file: files.0.into(),
                    right: rt.name().into(),
                    right_file: files.1.into(),
                });
            }
            lkeys.push(l);
            rkeys.push(r);
        }
        let lrest: Vec<usize> = (0..left.names().len())
            .filter(|i| !lkeys.contains(i))
            .collect();
        let rrest: Vec<usize> = (0..right.names().len())
            .filter(|i| !rkeys.contains(i))
            .collect();
        let mut names: Vec<String> = on.to_vec();
        names.extend(lrest.iter().map(|&i| left.names()[i].clone()));
        for &i in &rrest {
            let mut n = right.names()[i].clone();
            let mut k = 1;
            while names.contains(&n) {
                n = format!("{}_{k}", right.names()[i]);
                k += 1;
            }
            names.push(n);
        }
        Ok(JoinShape {
            kind,
            lkeys,
            rkeys,
            lrest,
            rrest,
            lschema: (left.names().to_vec(), left.dtypes()),
            rschema: (right.names().to_vec(), right.dtypes()),
            names,
        })
    }

    /// Every column of the left table (what a moved left row carries).
    pub fn lall(&self) -> Vec<usize> {
        (0..self.lschema.0.len()).collect()
    }

    /// Every column of the right table.
    pub fn rall(&self) -> Vec<usize> {
        (0..self.rschema.0.len()).collect()
    }
}

/// The keys of a table's rows as bytes: row i's key is `bytes[offs[i]..offs[i + 1]]`, or
/// none when a key column is NULL there (such a row never matches).
#[derive(Clone, Debug, Default)]
pub struct Keys {
    bytes: Vec<u8>,
    offs: Vec<usize>,
    null: Vec<bool>,
}

impl Keys {
    /// The keys of `t` over the columns `cols`.
    pub fn of(t: &Table, cols: &[usize]) -> Keys {
        let n = t.rows();
        let mut k = Keys {
            bytes: Vec::new(),
            offs: Vec::with_capacity(n + 1),
            null: Vec::with_capacity(n),
        };
        k.offs.push(0);
        for i in 0..n {
            let at = k.bytes.len();
            let ok = cols
                .iter()
                .all(|&c| t.columns()[c].key_value(i, &mut k.bytes));
            if !ok {
                k.bytes.truncate(at);
            }
            k.null.push(!ok);
            k.offs.push(k.bytes.len());
        }
        k
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.null.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.null.is_empty()
    }

    /// Row i's key, `None` when NULL.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (!self.null[i]).then(|| &self.bytes[self.offs[i]..self.offs[i + 1]])
    }
}

/// FNV-1a over the key's bytes with a final mix: the same on every rank and process, so a
/// key's owner is agreed without asking.
pub fn key_hash(k: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in k {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// The rank of `p` that owns key `k` in a shuffle.
pub fn owner(k: &[u8], p: usize) -> usize {
    (key_hash(k) % p as u64) as usize
}

/// The hasher of the local hash tables (FNV with the final mix, as [`key_hash`]).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        key_hash(&self.0.to_le_bytes())
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0 ^ 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A hash map keyed by key bytes.
pub type KeyMap<'a, V> = HashMap<&'a [u8], V, BuildHasherDefault<KeyHasher>>;

/// A join index: pairs of (left row, right row), either side absent for an unmatched row of
/// an outer join (the sparse product `kl,kr->lr` of the two relations, with its margins).
pub type Pairs = Vec<(Option<usize>, Option<usize>)>;

/// The local hash join of `l` and `r`: every matching pair (left rows in order, each with its
/// matches in right order), then the unmatched left rows (`keep_left`, in place among them)
/// and the unmatched right rows (`keep_right`, at the end). Also returns which left rows and
/// which right rows matched.
pub fn hash_join(
    l: &Keys,
    r: &Keys,
    keep_left: bool,
    keep_right: bool,
) -> (Pairs, Vec<bool>, Vec<bool>) {
    let mut table: KeyMap<Vec<usize>> = KeyMap::default();
    for j in 0..r.len() {
        if let Some(k) = r.get(j) {
            table.entry(k).or_default().push(j);
        }
    }
    let mut rmatched = vec![false; r.len()];
    let mut lmatched = vec![false; l.len()];
    let mut pairs = Vec::new();
    for (i, lm) in lmatched.iter_mut().enumerate() {
        match l.get(i).and_then(|k| table.get(k)) {
            Some(js) => {
                *lm = true;
                for &j in js {
                    pairs.push((Some(i), Some(j)));
                    rmatched[j] = true;
                }
            }
            None if keep_left => pairs.push((Some(i), None)),
            None => {}
        }
    }
    if keep_right {
        pairs.extend(
            (0..r.len())
                .filter(|&j| !rmatched[j])
                .map(|j| (None, Some(j))),
        );
    }
    (pairs, lmatched, rmatched)
}

/// The output rows of `pairs` over the left table `l` and the right table `r` (both with all
/// their columns): keys coalesced, then the left's other columns, then the right's.
pub fn assemble(
    shape: &JoinShape,
    l: &Table,
    r: &Table,
    pairs: &[(Option<usize>, Option<usize>)],
) -> Table {
    let li: Vec<Option<usize>> = pairs.iter().map(|p| p.0).collect();
    let ri: Vec<Option<usize>> = pairs.iter().map(|p| p.1).collect();
    let mut cols: Vec<Column> = Vec::with_capacity(shape.names.len());
    let any_right_only = ri.iter().zip(&li).any(|(r, l)| l.is_none() && r.is_some());
    for (&a, &b) in shape.lkeys.iter().zip(&shape.rkeys) {
        let lk = l.columns()[a].take(&li);
        cols.push(if any_right_only {
            lk.coalesce(&r.columns()[b].take(&ri))
        } else {
            lk
        });
    }
    cols.extend(shape.lrest.iter().map(|&c| l.columns()[c].take(&li)));
    cols.extend(shape.rrest.iter().map(|&c| r.columns()[c].take(&ri)));
    Table::new(shape.names.clone(), cols).expect("columns of one length")
}

/// The join of whole tables by comparing every pair of rows (the serial reference the
/// distributed strategies are tested against).
pub fn nested_loop_join(shape: &JoinShape, l: &Table, r: &Table) -> Table {
    let (lk, rk) = (Keys::of(l, &shape.lkeys), Keys::of(r, &shape.rkeys));
    let mut pairs = Vec::new();
    let mut rmatched = vec![false; r.rows()];
    for i in 0..l.rows() {
        let mut any = false;
        for (j, m) in rmatched.iter_mut().enumerate() {
            if let (Some(a), Some(b)) = (lk.get(i), rk.get(j)) {
                if a == b {
                    pairs.push((Some(i), Some(j)));
                    *m = true;
                    any = true;
                }
            }
        }
        if !any && shape.kind.keeps_left() {
            pairs.push((Some(i), None));
        }
    }
    if shape.kind.keeps_right() {
        pairs.extend(
            (0..r.rows())
                .filter(|&j| !rmatched[j])
                .map(|j| (None, Some(j))),
        );
    }
    assemble(shape, l, r, &pairs)
}
