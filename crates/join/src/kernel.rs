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

/// The keys of a table's rows as bytes: row i's key is `bytes[offs[i]..offs[i + 1]]` (or,
/// keys of one fixed width `w`, `bytes[w·i..w·(i + 1)]`, no offsets kept), or none when a key
/// column is NULL there (such a row never matches).
#[derive(Clone, Debug, Default)]
pub struct Keys {
    bytes: Vec<u8>,
    offs: Vec<usize>,
    null: Vec<bool>,
    /// Every key's width, when one (then `offs` is empty and a NULL's slot holds zeros).
    width: Option<usize>,
}

impl Keys {
    /// The keys of `t` over the columns `cols`.
    pub fn of(t: &Table, cols: &[usize]) -> Keys {
        let n = t.rows();
        // One int64 key column (the common case): its words straight, no dispatch a cell and
        // no offsets (a third of the bytes of a row's key otherwise).
        if let [c] = cols {
            if let Column::Int64(v) = &t.columns()[*c] {
                let mut bytes = Vec::with_capacity(8 * n);
                for &x in v.values() {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
                return Keys {
                    bytes,
                    offs: Vec::new(),
                    null: (0..n).map(|i| v.is_null(i)).collect(),
                    width: Some(8),
                };
            }
        }
        // A guess at the bytes (8 a cell, a fixed-width key's exact size), so the buffer is
        // not grown and copied again and again on a big table.
        let mut k = Keys {
            bytes: Vec::with_capacity(n * 8 * cols.len()),
            offs: Vec::with_capacity(n + 1),
            null: Vec::with_capacity(n),
            width: None,
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

    /// Row i's key as a word when every key is 8 bytes (one int64 or float64 column: equal
    /// words are equal keys), `None` when NULL; `None` for every row otherwise.
    #[inline]
    fn word(&self, i: usize) -> Option<u64> {
        (self.width == Some(8) && !self.null[i])
            .then(|| u64::from_le_bytes(self.bytes[8 * i..8 * i + 8].try_into().expect("8 bytes")))
    }

    /// Row i's key, `None` when NULL.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        (!self.null[i]).then(|| match self.width {
            Some(w) => &self.bytes[w * i..w * (i + 1)],
            None => &self.bytes[self.offs[i]..self.offs[i + 1]],
        })
    }
}

/// The key's hash: its bytes taken 8 at a time (a rotate, xor and multiply a word, the tail
/// packed in one word with the length), then murmur3's 64-bit finalizer. The same on every
/// rank and process, so a key's owner is agreed without asking. (FNV-1a a byte at a time, used
/// before, was a chain of eight dependent multiplies for an int64 key: the inspector pass
/// hashes every row.)
#[inline]
pub fn key_hash(k: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut words = k.chunks_exact(8);
    for c in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = step(h, u64::from_le_bytes(w));
    }
    let mut tail = [0u8; 8];
    let rest = words.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    // The length keeps keys that differ only by trailing zero bytes apart.
    h = step(h, u64::from_le_bytes(tail) ^ ((k.len() as u64) << 56));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
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

/// One pair of a [`Pairs`]: (left row, right row), `None` for an absent side.
pub type Pair = (Option<usize>, Option<usize>);

pub use crate::table::NO_ROW;

/// A join index: pairs of (left row, right row), either side absent for an unmatched row of
/// an outer join (the sparse product `kl,kr->lr` of the two relations, with its margins).
/// Kept as two columns of `u32` row numbers, [`NO_ROW`] for an absent side: 8 bytes a pair
/// instead of the 32 of a `(Option<usize>, Option<usize>)`, and each side's column is the
/// gather list of that side's output columns as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs {
    left: Vec<u32>,
    right: Vec<u32>,
}

/// A row number as a [`Pairs`] entry.
#[inline]
fn row_code(i: Option<usize>) -> u32 {
    i.map_or(NO_ROW, |i| {
        u32::try_from(i)
            .ok()
            .filter(|&x| x != NO_ROW)
            .expect("under 2^32 - 1 rows on a rank")
    })
}

/// A [`Pairs`] entry as a row number.
#[inline]
fn row_of(x: u32) -> Option<usize> {
    (x != NO_ROW).then_some(x as usize)
}

impl Pairs {
    /// No pairs.
    pub fn new() -> Pairs {
        Pairs::default()
    }

    /// No pairs, room for `n`.
    pub fn with_capacity(n: usize) -> Pairs {
        Pairs {
            left: Vec::with_capacity(n),
            right: Vec::with_capacity(n),
        }
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.left.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// Appends a pair.
    #[inline]
    pub fn push(&mut self, l: Option<usize>, r: Option<usize>) {
        self.left.push(row_code(l));
        self.right.push(row_code(r));
    }

    /// Pair `x`.
    #[inline]
    pub fn get(&self, x: usize) -> Pair {
        (row_of(self.left[x]), row_of(self.right[x]))
    }

    /// The left rows, pair by pair ([`NO_ROW`]: none).
    pub fn left(&self) -> &[u32] {
        &self.left
    }

    /// The right rows, pair by pair ([`NO_ROW`]: none).
    pub fn right(&self) -> &[u32] {
        &self.right
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = Pair> + '_ {
        self.left
            .iter()
            .zip(&self.right)
            .map(|(&a, &b)| (row_of(a), row_of(b)))
    }

    /// Keeps the pairs for which `f` holds, in order.
    pub fn retain(&mut self, mut f: impl FnMut(Option<usize>, Option<usize>) -> bool) {
        let mut n = 0;
        for x in 0..self.left.len() {
            let (a, b) = (self.left[x], self.right[x]);
            if f(row_of(a), row_of(b)) {
                self.left[n] = a;
                self.right[n] = b;
                n += 1;
            }
        }
        self.left.truncate(n);
        self.right.truncate(n);
    }
}

impl Extend<Pair> for Pairs {
    fn extend<I: IntoIterator<Item = Pair>>(&mut self, it: I) {
        for (a, b) in it {
            self.push(a, b);
        }
    }
}

impl FromIterator<Pair> for Pairs {
    fn from_iter<I: IntoIterator<Item = Pair>>(it: I) -> Pairs {
        let mut p = Pairs::new();
        p.extend(it);
        p
    }
}

impl IntoIterator for Pairs {
    type Item = Pair;
    type IntoIter = std::iter::Map<
        std::iter::Zip<std::vec::IntoIter<u32>, std::vec::IntoIter<u32>>,
        fn((u32, u32)) -> Pair,
    >;
    fn into_iter(self) -> Self::IntoIter {
        let f: fn((u32, u32)) -> Pair = |(a, b)| (row_of(a), row_of(b));
        self.left.into_iter().zip(self.right).map(f)
    }
}

/// A key's tag in a [`KeyIndex`]: its bytes as a word when it has 8 (a single int64 or
/// float64 key: equal tags of 8-byte keys are equal keys, no bytes compared), else its
/// [`key_hash`].
#[inline]
fn tag(k: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(k) {
        Ok(w) => u64::from_le_bytes(w),
        Err(_) => key_hash(k),
    }
}

/// One slot of a [`KeyIndex`]: the key's tag, its number plus one (0: empty), its length.
#[derive(Clone, Copy, Default)]
struct Slot {
    tag: u64,
    id: u32,
    len: u32,
}

/// The distinct keys seen, numbered 0, 1, … in order of first insertion: an open-addressing
/// table (linear probing, at most half full) whose slots hold the key's tag, so a probe of a
/// fixed-width key touches one slot and no key bytes (the local joins' and the inspector's
/// hot loop; a `HashMap<&[u8], Vec<_>>` cost an allocation per key and a `memcmp` per probe).
pub struct KeyIndex<'a> {
    slots: Vec<Slot>,
    keys: Vec<&'a [u8]>,
    shift: u32,
}

impl<'a> KeyIndex<'a> {
    /// An index sized for about `n` distinct keys (it grows past them).
    pub fn with_capacity(n: usize) -> KeyIndex<'a> {
        let bits = (2 * n.max(8)).next_power_of_two().trailing_zeros();
        KeyIndex {
            slots: vec![Slot::default(); 1 << bits],
            keys: Vec::with_capacity(n),
            shift: 64 - bits,
        }
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key was inserted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key numbered `id`.
    pub fn key(&self, id: usize) -> &'a [u8] {
        self.keys[id]
    }

    /// The keys in the order of their numbers.
    pub fn keys(&self) -> &[&'a [u8]] {
        &self.keys
    }

    /// The first slot to probe for `tag` (Fibonacci hashing: the top bits of a multiple).
    #[inline]
    fn home(&self, tag: u64) -> usize {
        fib_slot(tag, self.shift)
    }

    /// The slot holding `k` (`Ok`) or the empty slot where it would go (`Err`).
    #[inline]
    fn find(&self, k: &[u8], t: u64) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let len = k.len() as u32;
        let mut i = self.home(t);
        loop {
            let s = self.slots[i];
            if s.id == 0 {
                return Err(i);
            }
            if s.tag == t && s.len == len && (len == 8 || self.keys[s.id as usize - 1] == k) {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Reads the slot where a probe for `k` starts, so that a batch of keys warmed first
    /// has its cache misses in flight together rather than one after the other (the tables
    /// of a big join are far larger than the caches).
    #[inline]
    pub fn warm(&self, k: &[u8]) {
        std::hint::black_box(self.slots[self.home(tag(k))].tag);
    }

    /// The number of `k`, if it was inserted.
    #[inline]
    pub fn get(&self, k: &[u8]) -> Option<usize> {
        self.find(k, tag(k))
            .ok()
            .map(|i| self.slots[i].id as usize - 1)
    }

    /// The number of `k`, inserting it (next number) when new; and whether it was new.
    #[inline]
    pub fn insert(&mut self, k: &'a [u8]) -> (usize, bool) {
        let t = tag(k);
        match self.find(k, t) {
            Ok(i) => (self.slots[i].id as usize - 1, false),
            Err(mut i) => {
                if 2 * (self.keys.len() + 1) > self.slots.len() {
                    self.grow();
                    i = self.find(k, t).expect_err("a new key");
                }
                let id = self.keys.len();
                self.keys.push(k);
                self.slots[i] = Slot {
                    tag: t,
                    id: u32::try_from(id + 1).expect("under 2^32 distinct keys on a rank"),
                    len: k.len() as u32,
                };
                (id, true)
            }
        }
    }

    /// Doubles the slots and re-files every key.
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.slots = vec![Slot::default(); 2 * old.len()];
        self.shift -= 1;
        let mask = self.slots.len() - 1;
        for s in old.into_iter().filter(|s| s.id != 0) {
            let mut i = self.home(s.tag);
            while self.slots[i].id != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

/// Keys warmed together ([`KeyIndex::warm`]).
pub const BATCH: usize = 16;

/// The end of a key's chain in [`KeyChains`].
const NO_ITEM: u32 = u32::MAX;

/// Items (rows, entries) filed by key and chained per key in the order filed: a [`KeyIndex`]
/// of the keys, each key's first and last item, and each item's next of the same key. One flat
/// list, not a `Vec` per key (the local join's right rows, the inspector's received
/// summaries).
pub struct KeyChains<'a> {
    index: KeyIndex<'a>,
    head: Vec<u32>,
    tail: Vec<u32>,
    next: Vec<u32>,
}

impl<'a> KeyChains<'a> {
    /// Room for about `keys` distinct keys and `items` items.
    pub fn with_capacity(keys: usize, items: usize) -> KeyChains<'a> {
        KeyChains {
            index: KeyIndex::with_capacity(keys),
            head: Vec::with_capacity(keys),
            tail: Vec::with_capacity(keys),
            next: Vec::with_capacity(items),
        }
    }

    /// Files item `at` (numbers increase from one call to the next; the caller keeps the
    /// item's data at that number) under `k`.
    pub fn push(&mut self, k: &'a [u8], at: usize) {
        let at = u32::try_from(at).expect("under 2^32 items on a rank");
        if self.next.len() <= at as usize {
            self.next.resize(at as usize + 1, NO_ITEM);
        }
        let (id, new) = self.index.insert(k);
        if new {
            self.head.push(at);
            self.tail.push(at);
        } else {
            self.next[self.tail[id] as usize] = at;
            self.tail[id] = at;
        }
    }

    /// The keys and their numbers.
    pub fn index(&self) -> &KeyIndex<'a> {
        &self.index
    }

    /// The items of key number `id`, in the order filed.
    pub fn items(&self, id: usize) -> impl Iterator<Item = usize> + '_ {
        let mut e = self.head[id];
        std::iter::from_fn(move || {
            (e != NO_ITEM).then(|| {
                let at = e as usize;
                e = self.next[at];
                at
            })
        })
    }
}

/// The rows of `k` chained per key (each row's number is its item number).
fn chain_rows(k: &Keys) -> KeyChains<'_> {
    let mut chains = KeyChains::with_capacity(k.len(), k.len());
    for j in 0..k.len() {
        if let Some(key) = k.get(j) {
            chains.push(key, j);
        }
    }
    chains
}

/// The home slot of `x` in a table of `2^(64 - shift)` slots: Fibonacci hashing (the top
/// bits of `x` times 2^64/φ), which spreads consecutive integer keys over the whole table.
#[inline]
fn fib_slot(x: u64, shift: u32) -> usize {
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift) as usize
}

/// One slot of a [`WordTable`]: a key, its first row plus one (0: empty) and its last row.
#[derive(Clone, Copy, Default)]
struct WordSlot {
    key: u64,
    head: u32,
    tail: u32,
}

/// The right rows of a join on 8-byte keys by key: an open-addressing table (linear probing,
/// at most half full) whose slot holds the key and its first and last row, so a probe of a
/// key whose rows are one (a dimension table's) touches one slot and nothing else; the later
/// rows of a repeated key are chained in `next` (made at the first repeat).
struct WordTable {
    slots: Vec<WordSlot>,
    next: Vec<u32>,
    shift: u32,
}

impl WordTable {
    /// The table of the keyed rows of `r` (keys of 8 bytes).
    fn of(r: &Keys) -> WordTable {
        let n = r.len();
        let bits = (2 * n.max(8)).next_power_of_two().trailing_zeros();
        let mut t = WordTable {
            slots: vec![WordSlot::default(); 1 << bits],
            next: Vec::new(),
            shift: 64 - bits,
        };
        let mask = t.slots.len() - 1;
        for j in 0..n {
            let Some(k) = r.word(j) else { continue };
            let row = u32::try_from(j)
                .ok()
                .filter(|&x| x != NO_ITEM)
                .expect("under 2^32 - 1 rows on a rank");
            let mut i = t.home(k);
            loop {
                let s = &mut t.slots[i];
                if s.head == 0 {
                    *s = WordSlot {
                        key: k,
                        head: row + 1,
                        tail: row,
                    };
                    break;
                }
                if s.key == k {
                    let last = s.tail as usize;
                    s.tail = row;
                    if t.next.is_empty() {
                        t.next = vec![NO_ITEM; n];
                    }
                    t.next[last] = row;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        t
    }

    /// The first slot to probe for `k`.
    #[inline]
    fn home(&self, k: u64) -> usize {
        fib_slot(k, self.shift)
    }

    /// The slot of key `k`, if some row has it.
    #[inline]
    fn find(&self, k: u64) -> Option<WordSlot> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(k);
        loop {
            let s = self.slots[i];
            if s.head == 0 {
                return None;
            }
            if s.key == k {
                return Some(s);
            }
            i = (i + 1) & mask;
        }
    }
}

/// [`hash_join`] of keys of 8 bytes on both sides, through a [`WordTable`] (the same pairs in
/// the same order).
fn hash_join_words(
    l: &Keys,
    r: &Keys,
    keep_left: bool,
    keep_right: bool,
) -> (Pairs, Vec<bool>, Vec<bool>) {
    let table = WordTable::of(r);
    let mut rmatched = vec![false; r.len()];
    let mut lmatched = vec![false; l.len()];
    let mut pairs = Pairs::with_capacity(l.len());
    let n = l.len();
    for start in (0..n).step_by(BATCH) {
        let end = n.min(start + BATCH);
        // The slots of a batch read first, their cache misses in flight together.
        for i in start..end {
            if let Some(k) = l.word(i) {
                std::hint::black_box(table.slots[table.home(k)].key);
            }
        }
        for (i, lm) in (start..end).zip(&mut lmatched[start..end]) {
            let row = u32::try_from(i)
                .ok()
                .filter(|&x| x != NO_ROW)
                .expect("under 2^32 - 1 rows on a rank");
            match l.word(i).and_then(|k| table.find(k)) {
                Some(s) => {
                    *lm = true;
                    let mut j = s.head - 1;
                    loop {
                        pairs.left.push(row);
                        pairs.right.push(j);
                        rmatched[j as usize] = true;
                        if j == s.tail {
                            break;
                        }
                        j = table.next[j as usize];
                    }
                }
                None if keep_left => {
                    pairs.left.push(row);
                    pairs.right.push(NO_ROW);
                }
                None => {}
            }
        }
    }
    if keep_right {
        push_unmatched_right(&mut pairs, &rmatched);
    }
    (pairs, lmatched, rmatched)
}

/// Appends a pair with no left row for every right row `rmatched` marks unmatched, in order
/// (the right margin of an outer join).
fn push_unmatched_right(pairs: &mut Pairs, rmatched: &[bool]) {
    pairs.extend(
        (0..rmatched.len())
            .filter(|&j| !rmatched[j])
            .map(|j| (None, Some(j))),
    );
}

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
    if l.width == Some(8) && r.width == Some(8) {
        return hash_join_words(l, r, keep_left, keep_right);
    }
    let chains = chain_rows(r);
    let index = chains.index();
    let mut rmatched = vec![false; r.len()];
    let mut lmatched = vec![false; l.len()];
    // A left row has one match or none when the right's keys are distinct (a dimension table):
    // then this is the output's size or more.
    let mut pairs = Pairs::with_capacity(l.len());
    for (i, lm) in lmatched.iter_mut().enumerate() {
        if i % BATCH == 0 {
            for k in (i..l.len().min(i + BATCH)).filter_map(|x| l.get(x)) {
                index.warm(k);
            }
        }
        match l.get(i).and_then(|k| index.get(k)) {
            Some(id) => {
                *lm = true;
                for j in chains.items(id) {
                    pairs.push(Some(i), Some(j));
                    rmatched[j] = true;
                }
            }
            None if keep_left => pairs.push(Some(i), None),
            None => {}
        }
    }
    if keep_right {
        push_unmatched_right(&mut pairs, &rmatched);
    }
    (pairs, lmatched, rmatched)
}

/// The output rows of `pairs` over the left table `l` and the right table `r` (both with all
/// their columns): keys coalesced, then the left's other columns, then the right's.
pub fn assemble(shape: &JoinShape, l: &Table, r: &Table, pairs: &Pairs) -> Table {
    let mut cols: Vec<Column> = Vec::with_capacity(shape.names.len());
    let any_right_only = pairs
        .left()
        .iter()
        .zip(pairs.right())
        .any(|(&a, &b)| a == NO_ROW && b != NO_ROW);
    for (&a, &b) in shape.lkeys.iter().zip(&shape.rkeys) {
        let lk = l.columns()[a].gather(pairs.left());
        cols.push(if any_right_only {
            lk.coalesce(&r.columns()[b].gather(pairs.right()))
        } else {
            lk
        });
    }
    cols.extend(
        shape
            .lrest
            .iter()
            .map(|&c| l.columns()[c].gather(pairs.left())),
    );
    cols.extend(
        shape
            .rrest
            .iter()
            .map(|&c| r.columns()[c].gather(pairs.right())),
    );
    Table::new(shape.names.clone(), cols).expect("columns of one length")
}

/// The join of whole tables by comparing every pair of rows (the serial reference the
/// distributed strategies are tested against).
pub fn nested_loop_join(shape: &JoinShape, l: &Table, r: &Table) -> Table {
    let (lk, rk) = (Keys::of(l, &shape.lkeys), Keys::of(r, &shape.rkeys));
    let mut pairs = Pairs::new();
    let mut rmatched = vec![false; r.rows()];
    for i in 0..l.rows() {
        let mut any = false;
        for (j, m) in rmatched.iter_mut().enumerate() {
            if let (Some(a), Some(b)) = (lk.get(i), rk.get(j)) {
                if a == b {
                    pairs.push(Some(i), Some(j));
                    *m = true;
                    any = true;
                }
            }
        }
        if !any && shape.kind.keeps_left() {
            pairs.push(Some(i), None);
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

#[cfg(test)]
mod tests {
    use super::{hash_join, KeyIndex, Keys};
    use crate::table::Cells;
    use crate::{Column, Table};

    #[test]
    fn word_keys_join_as_byte_keys_do_with_nulls_repeats_and_misses() {
        // Keys with repeats on both sides, NULLs on both, keys only one side has; the word
        // table's pairs must equal the byte-key chains' pair for pair, in order.
        let col = |n: i64, m: i64| -> Column {
            Column::Int64(
                (0..n)
                    .map(|i| (i % 7 != 3).then_some((i * 31 + 5) % m))
                    .collect::<Cells<i64>>(),
            )
        };
        let l = Table::new(vec!["k".into()], vec![col(500, 90)]).unwrap();
        let r = Table::new(vec!["k".into()], vec![col(200, 120)]).unwrap();
        let (lk, rk) = (Keys::of(&l, &[0]), Keys::of(&r, &[0]));
        assert_eq!(lk.width, Some(8));
        let bytes = |k: &Keys| Keys {
            offs: (0..=k.len()).map(|i| 8 * i).collect(),
            width: None,
            ..k.clone()
        };
        let (lb, rb) = (bytes(&lk), bytes(&rk));
        for (kl, kr) in [(false, false), (true, false), (false, true), (true, true)] {
            let words = hash_join(&lk, &rk, kl, kr);
            let chains = hash_join(&lb, &rb, kl, kr);
            assert!(words.0.len() > 200, "repeats give more pairs than rows");
            assert_eq!(words.0, chains.0, "keep_left {kl} keep_right {kr}");
            assert_eq!((words.1, words.2), (chains.1, chains.2));
        }
    }

    #[test]
    fn key_index_numbers_distinct_keys_in_first_sight_order_across_growth() {
        // Keys of 8 bytes (compared as words) and of other lengths (compared as bytes), whose
        // tags may meet; enough of them for several doublings.
        let keys: Vec<Vec<u8>> = (0u64..5000)
            .map(|i| match i % 3 {
                0 => i.to_le_bytes().to_vec(),
                1 => i.to_le_bytes()[..4].to_vec(),
                _ => [i.to_le_bytes(), (i * 7).to_le_bytes()].concat(),
            })
            .collect();
        let mut index = KeyIndex::with_capacity(4);
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(index.insert(k), (n, true));
        }
        for (n, k) in keys.iter().enumerate().rev() {
            assert_eq!(index.insert(k), (n, false));
            assert_eq!(index.get(k), Some(n));
            assert_eq!(index.key(n), &k[..]);
        }
        assert_eq!(index.len(), keys.len());
        assert_eq!(index.get(&5000u64.to_le_bytes()), None);
        assert_eq!(index.get(&[1, 2, 3]), None);
    }
}
