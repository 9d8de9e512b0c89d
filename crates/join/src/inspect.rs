//! The inspector pass: statistics of the keys from which every strategy's bytes per rank are
//! predicted before any row moves, exact ([`InspectMode::Exact`], here) or from fixed-size
//! sketches ([`InspectMode::Sketch`], [`crate::inspector`], which runs either).
//!
//! Each rank summarizes its rows per distinct key (rows, encoded bytes of whole rows, encoded
//! bytes of the non-key columns, per side) and sends each summary to the key's owner (an
//! all-to-all of `4 + len(key) + 48` bytes per distinct key). Owners add up what every
//! strategy will move for their keys; one sum over ranks makes the figures known everywhere.

use crate::bloom::{filter_bytes, Stripe};
use crate::coll;
use crate::cost::{Prediction, Strategy};
use crate::kernel::{key_hash, owner, JoinShape, KeyChains, KeyIndex, Keys, BATCH};
use crate::table::RowSizes;
use crate::{JoinError, Table};
use deinsum_exec::Communicator;
use serde::Serialize;

/// How the inspector gathers its figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum InspectMode {
    /// Every distinct key's summary to its owner: every figure exact, at an all-to-all as
    /// large as the distinct keys.
    Exact,
    /// Fixed-size sketches (HyperLogLog, Misra–Gries) merged over ranks: sizes, the bytes a
    /// shuffle or broadcast moves and the heavy keys exact, the matches estimated.
    Sketch,
    /// Sketch when the tables hold at least [`crate::inspector::SKETCH_ROWS`] rows in all,
    /// else exact.
    #[default]
    Auto,
}

impl InspectMode {
    /// The mode of a name (`exact`, `sketch`, `auto`).
    pub fn from_name(s: &str) -> Result<InspectMode, JoinError> {
        match s.to_ascii_lowercase().as_str() {
            "exact" => Ok(InspectMode::Exact),
            "sketch" => Ok(InspectMode::Sketch),
            "auto" => Ok(InspectMode::Auto),
            _ => Err(JoinError::Invalid(format!(
                "--inspect must be one of exact, sketch, auto, got `{s}`"
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            InspectMode::Exact => "exact",
            InspectMode::Sketch => "sketch",
            InspectMode::Auto => "auto",
        }
    }
}

/// A key's summary on one rank: left rows, left whole-row bytes, left non-key bytes, and the
/// same on the right.
pub(crate) type Summary = [u64; 6];

/// The per-rank figures the sum over ranks gathers.
const RANK_FIGS: usize = 6;
/// Strategy slots: shuffle, broadcast of the left, broadcast of the right, semi-join, index,
/// Bloom semi-join.
pub(crate) const SLOTS: usize = 6;
/// Figures per slot and rank: sent, received, rows read by the local join, rows produced.
const SLOT_FIGS: usize = 4;
/// Global figures: matched pairs, output bytes.
const GLOBALS: usize = 2;

/// Bytes of a key in a key list or a (key, row) message: a u32 length and the key.
pub fn key_msg_bytes(k: &[u8]) -> u64 {
    4 + k.len() as u64
}

/// A key is heavy in a shuffle when its rows (both sides) exceed the keyed rows of both
/// tables over `HEAVY_SHARE · P`: sent whole to one owner it would load that rank with more
/// than a sixteenth of a fair share, so its smaller side is broadcast and its other side
/// stays where it is instead.
pub const HEAVY_SHARE: u64 = 16;

/// The rows above which a key is heavy, for `total` keyed rows on `p` ranks (none on one).
pub fn heavy_threshold(total: u64, p: usize) -> u64 {
    if p <= 1 {
        u64::MAX
    } else {
        (total / (HEAVY_SHARE * p as u64)).max(1)
    }
}

/// A key of a semi-join key list costs its receiver as many rows of the local join: a look-up
/// in the index of its right keys, as a probe row (filing every listed key in a map with the
/// list of the ranks wanting it, as before, cost two rows and more).
pub const SEMI_KEY_ROWS: u64 = 1;

/// Bytes of a row number in a message.
pub const ROW_NUMBER: u64 = 8;
/// Bytes of one entry of the join index sent to a right row's holder: its row, the left
/// row's rank (u32) and row.
pub const INDEX_ENTRY: u64 = 8 + 4 + 8;

/// What the sketch inspector estimated, and the bounds of its sketches.
#[derive(Clone, Debug, Serialize)]
pub struct SketchFigures {
    /// Distinct non-NULL left keys (HyperLogLog estimate).
    pub left_distinct: u64,
    /// Distinct non-NULL right keys.
    pub right_distinct: u64,
    /// Distinct keys of both tables.
    pub union_distinct: u64,
    /// Keys on both sides (left + right - union, within [0, min(left, right)]).
    pub matched_distinct: u64,
    /// The HyperLogLog estimates' relative standard error.
    pub distinct_rel_error: f64,
    /// Misra–Gries counters per side.
    pub counters: usize,
    /// Keys counted exactly (the merged summaries' counters, both sides).
    pub candidates: usize,
    /// The most the left summary undercounts a key's sampled count (at most N_L/(counters+1);
    /// on large tables the summary counts every s-th row s times,
    /// [`crate::inspector::summary_stride`]).
    pub left_count_error: u64,
    /// The same on the right.
    pub right_count_error: u64,
    /// Figures that are estimates: output rows and bytes, every strategy's rows out, and the
    /// bytes of the strategies whose `bytes_exact` is false.
    pub estimated: Vec<String>,
}

/// One rank's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RankFigures {
    /// Left rows held.
    pub left_rows: u64,
    /// Right rows held.
    pub right_rows: u64,
    /// Left rows with a non-NULL key (the ones that can match and move).
    pub left_keyed: u64,
    /// Right rows with a non-NULL key.
    pub right_keyed: u64,
    /// Distinct non-NULL left keys (the length of its semi-join key list, the size of its
    /// Bloom filter).
    pub left_distinct: u64,
    /// Encoded bytes of the keyed left rows.
    pub left_bytes: u64,
    /// Encoded bytes of the keyed right rows.
    pub right_bytes: u64,
}

/// What the inspector found; the same on every rank.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    /// Ranks.
    pub procs: usize,
    /// Per rank.
    pub ranks: Vec<RankFigures>,
    /// Output rows.
    pub output_rows: u64,
    /// Output bytes (as rows are encoded when they move).
    pub output_bytes: u64,
    /// Whether the broadcast join replicates the left table (the smaller in bytes).
    pub broadcast_left: bool,
    /// Every strategy's prediction, in [`Strategy::ALL`] order (tables split by columns: the
    /// join index's alone).
    pub predictions: Vec<Prediction>,
    /// Keys the shuffle treats as heavy (see [`HEAVY_SHARE`]).
    pub heavy_keys: usize,
    /// The heavy keys' bytes and whether their left side is the one broadcast (else the
    /// right), in the order every rank has them.
    #[serde(skip)]
    pub heavy: Vec<(Vec<u8>, bool)>,
    /// The sketch inspector's estimates (`None`: the exact inspector ran, every figure is
    /// exact). With them, the output's rows and bytes are estimates, and so is every
    /// prediction whose [`Prediction::bytes_exact`] or [`Prediction::rows_exact`] is false.
    pub sketch: Option<SketchFigures>,
}

impl Inspection {
    /// The mode that ran: exact or sketch.
    pub fn mode(&self) -> InspectMode {
        if self.sketch.is_some() {
            InspectMode::Sketch
        } else {
            InspectMode::Exact
        }
    }

    /// The prediction of `s` (the first prediction when `s` has none: a layout that runs one
    /// strategy predicts that one alone).
    pub fn prediction(&self, s: Strategy) -> &Prediction {
        self.predictions
            .iter()
            .find(|p| p.strategy == s)
            .unwrap_or(&self.predictions[0])
    }
}

/// Per-key summaries of this rank's rows: the distinct keys in order of first sight, and
/// each one's summary.
fn summarize<'a>(
    shape: &JoinShape,
    (l, lk, lall): (&Table, &'a Keys, &RowSizes),
    (r, rk, rall): (&Table, &'a Keys, &RowSizes),
) -> (Vec<&'a [u8]>, Vec<Summary>) {
    let mut index = KeyIndex::with_capacity(rk.len().max(1024));
    let mut sums: Vec<Summary> = Vec::new();
    for (t, k, all, rest, off) in [
        (l, lk, lall, &shape.lrest, 0),
        (r, rk, rall, &shape.rrest, 3),
    ] {
        let rest = t.row_sizes(rest);
        // In batches: the slots read first, then the keys filed, the summaries read, and
        // added to (each step's cache misses in flight together).
        let mut ids = [usize::MAX; BATCH];
        for start in (0..t.rows()).step_by(BATCH) {
            let rows = start..t.rows().min(start + BATCH);
            for key in rows.clone().filter_map(|i| k.get(i)) {
                index.warm(key);
            }
            for (i, id) in rows.clone().zip(&mut ids) {
                *id = k.get(i).map_or(usize::MAX, |key| {
                    let (id, new) = index.insert(key);
                    if new {
                        sums.push([0; 6]);
                    }
                    id
                });
            }
            for &id in ids[..rows.len()].iter().filter(|&&id| id != usize::MAX) {
                std::hint::black_box(sums[id][off]);
            }
            for (i, &id) in rows.zip(&ids).filter(|(_, &id)| id != usize::MAX) {
                let e = &mut sums[id];
                e[off] += 1;
                e[off + 1] += all.get(i);
                e[off + 2] += rest.get(i);
            }
        }
    }
    (index.keys().to_vec(), sums)
}

/// Index of a figure in the summed vector.
pub(crate) struct Layout {
    pub(crate) p: usize,
}

impl Layout {
    pub(crate) fn len(&self) -> usize {
        RANK_FIGS * self.p + SLOTS * SLOT_FIGS * self.p + GLOBALS + self.p * self.p
    }
    /// Right rows rank `s` sends rank `q` in the Bloom semi-join.
    pub(crate) fn pair(&self, s: usize, q: usize) -> usize {
        RANK_FIGS * self.p + SLOTS * SLOT_FIGS * self.p + GLOBALS + s * self.p + q
    }
    pub(crate) fn rank(&self, r: usize, f: usize) -> usize {
        r * RANK_FIGS + f
    }
    pub(crate) fn slot(&self, s: usize, f: usize, r: usize) -> usize {
        RANK_FIGS * self.p + (s * SLOT_FIGS + f) * self.p + r
    }
    pub(crate) fn global(&self, g: usize) -> usize {
        RANK_FIGS * self.p + SLOTS * SLOT_FIGS * self.p + g
    }
}

pub(crate) const SENT: usize = 0;
pub(crate) const RECV: usize = 1;
pub(crate) const ROWS_IN: usize = 2;
pub(crate) const ROWS_OUT: usize = 3;
pub(crate) const SHUFFLE: usize = 0;
pub(crate) const BCAST_L: usize = 1;
pub(crate) const BCAST_R: usize = 2;
pub(crate) const SEMI: usize = 3;
pub(crate) const INDEX: usize = 4;
pub(crate) const BLOOM: usize = 5;

/// What every owner knows of all ranks before it adds up its keys: which ranks hold keyed
/// right rows (the semi-joins' key lists go to them alone) and its stripe of every rank's
/// Bloom filter (`None` for a rank without left keys, which sends none).
pub(crate) struct Ranks {
    /// Rows above which a key is heavy in the shuffle.
    pub(crate) heavy: u64,
    /// Whether each rank holds keyed right rows.
    pub(crate) right_holder: Vec<bool>,
    /// `None` in the sketch inspector, whose candidate keys pass the filters of the ranks
    /// holding them on the left alone (false positives are estimated with the other keys).
    pub(crate) stripes: Option<Vec<Option<Stripe>>>,
}

/// Adds what every strategy moves for key `k`, whose summaries by rank are `by_rank`, owned
/// by rank `o`; a key of more than `ranks.heavy` rows is heavy. Returns, for a heavy key, whether
/// the shuffle broadcasts its left side (else its right).
pub(crate) fn add_key(
    v: &mut [u64],
    lay: &Layout,
    shape: &JoinShape,
    k: &[u8],
    o: usize,
    by_rank: &[(usize, Summary)],
    ranks: &Ranks,
) -> Option<bool> {
    let p = lay.p;
    let (kl, kr) = (shape.kind.keeps_left(), shape.kind.keeps_right());
    let lc: u64 = by_rank.iter().map(|(_, s)| s[0]).sum();
    let rc: u64 = by_rank.iter().map(|(_, s)| s[3]).sum();
    let lfb: u64 = by_rank.iter().map(|(_, s)| s[1]).sum();
    let rpb: u64 = by_rank.iter().map(|(_, s)| s[5]).sum();
    let rfb: u64 = by_rank.iter().map(|(_, s)| s[4]).sum();
    let pairs = lc * rc;
    // Unmatched rows kept by an outer join (a side whose key the other lacks).
    let l_un = if rc == 0 && kl { lc } else { 0 };
    let r_un = if lc == 0 && kr { rc } else { 0 };
    v[lay.global(0)] += pairs;
    v[lay.global(1)] += lfb * rc + rpb * lc;
    if l_un > 0 {
        v[lay.global(1)] += lfb + shape.rrest.len() as u64 * lc;
    }
    if r_un > 0 {
        v[lay.global(1)] += rfb + shape.lrest.len() as u64 * rc;
    }
    let kb = key_msg_bytes(k);
    let mut add = |slot: usize, f: usize, r: usize, x: u64| v[lay.slot(slot, f, r)] += x;
    // Shuffle: every keyed row to the owner, joined there; a heavy key's side of fewer bytes
    // to every rank instead, its other side staying, so its pairs are made where that is.
    let bcast_left = (lc + rc > ranks.heavy).then_some(lfb < rfb);
    match bcast_left {
        None => {
            for &(s, e) in by_rank {
                if s != o {
                    add(SHUFFLE, SENT, s, e[1] + e[4]);
                    add(SHUFFLE, RECV, o, e[1] + e[4]);
                }
            }
            add(SHUFFLE, ROWS_IN, o, lc + rc);
            add(SHUFFLE, ROWS_OUT, o, pairs + l_un + r_un);
        }
        Some(bl) => {
            let (bc, stay_kept) = if bl { (lc, kr) } else { (rc, kl) };
            for &(s, e) in by_rank {
                let (bb, st) = if bl { (e[1], e[3]) } else { (e[4], e[0]) };
                add(SHUFFLE, SENT, s, (p as u64 - 1) * bb);
                for r in (0..p).filter(|&r| r != s) {
                    add(SHUFFLE, RECV, r, bb);
                }
                add(SHUFFLE, ROWS_IN, s, st);
                let unmatched = if bc == 0 && stay_kept { st } else { 0 };
                add(SHUFFLE, ROWS_OUT, s, st * bc + unmatched);
            }
            for r in 0..p {
                add(SHUFFLE, ROWS_IN, r, bc);
            }
        }
    }
    // Broadcast of one side (moves follow from per-rank totals): the other side's holders
    // produce the pairs; a kept unmatched broadcast row comes from its own holder.
    for &(s, e) in by_rank {
        // Left broadcast: right rows stay.
        add(
            BCAST_L,
            ROWS_OUT,
            s,
            e[3] * lc + if kr && lc == 0 { e[3] } else { 0 },
        );
        add(BCAST_L, ROWS_OUT, s, if kl && rc == 0 { e[0] } else { 0 });
        add(
            BCAST_R,
            ROWS_OUT,
            s,
            e[0] * rc + if kl && rc == 0 { e[0] } else { 0 },
        );
        add(BCAST_R, ROWS_OUT, s, if kr && lc == 0 { e[3] } else { 0 });
    }
    let sides = Sides { lc, rc, kl, kr, kb };
    add_semi(v, lay, by_rank, &sides, &ranks.right_holder);
    add_index(v, lay, by_rank, o, &sides);
    // Only a key with right rows sends rows through the filters.
    let h = key_hash(k);
    let passes: Vec<usize> = (0..p)
        .filter(|&q| {
            rc > 0
                && match &ranks.stripes {
                    Some(st) => st[q].as_ref().is_some_and(|f| f.contains_hash(h)),
                    None => by_rank.iter().any(|&(s, e)| s == q && e[0] > 0),
                }
        })
        .collect();
    add_bloom(v, lay, by_rank, &sides, &passes);
    bcast_left
}

/// One key's totals over both tables, as the strategies' move counts need them.
#[derive(Clone, Copy)]
struct Sides {
    /// Left and right rows with the key.
    lc: u64,
    rc: u64,
    /// Whether the join keeps unmatched left (right) rows.
    kl: bool,
    kr: bool,
    /// Bytes of the key in a message.
    kb: u64,
}

/// Adds the semi-join's moves for one key: left key lists to every other rank holding keyed
/// right rows (`right_holder`), matching right rows back.
fn add_semi(
    v: &mut [u64],
    lay: &Layout,
    by_rank: &[(usize, Summary)],
    sd: &Sides,
    right_holder: &[bool],
) {
    let p = lay.p;
    let Sides { lc, rc, kl, kr, kb } = *sd;
    let mut add = |slot: usize, f: usize, r: usize, x: u64| v[lay.slot(slot, f, r)] += x;
    for &(s, e) in by_rank {
        if e[0] > 0 {
            for r in (0..p).filter(|&r| r != s && right_holder[r]) {
                add(SEMI, SENT, s, kb);
                add(SEMI, RECV, r, kb);
            }
            add(SEMI, ROWS_IN, s, e[0] + rc);
            add(
                SEMI,
                ROWS_OUT,
                s,
                e[0] * rc + if kl && rc == 0 { e[0] } else { 0 },
            );
        }
        if e[3] > 0 {
            for &(r, _) in by_rank.iter().filter(|&&(r, f)| r != s && f[0] > 0) {
                add(SEMI, SENT, s, e[4]);
                add(SEMI, RECV, r, e[4]);
            }
            if kr && lc == 0 {
                add(SEMI, ROWS_OUT, s, e[3]);
            }
        }
    }
}

/// Adds the Bloom semi-join's moves for one key, which the filters of the ranks `passes`
/// pass: every right row with it to each of them (false positives included), and the
/// left rows' output where they are. Filters and match flags are whole-rank figures, added
/// in [`finish`].
fn add_bloom(
    v: &mut [u64],
    lay: &Layout,
    by_rank: &[(usize, Summary)],
    sd: &Sides,
    passes: &[usize],
) {
    let Sides { lc, rc, kl, kr, .. } = *sd;
    for &(s, e) in by_rank {
        if e[0] > 0 {
            v[lay.slot(BLOOM, ROWS_IN, s)] += e[0];
            let un = if kl && rc == 0 { e[0] } else { 0 };
            v[lay.slot(BLOOM, ROWS_OUT, s)] += e[0] * rc + un;
        }
        if e[3] == 0 {
            continue;
        }
        for &q in passes {
            v[lay.slot(BLOOM, ROWS_IN, q)] += e[3];
            if q != s {
                v[lay.slot(BLOOM, SENT, s)] += e[4];
                v[lay.slot(BLOOM, RECV, q)] += e[4];
                v[lay.pair(s, q)] += e[3];
            }
        }
        if kr && lc == 0 {
            v[lay.slot(BLOOM, ROWS_OUT, s)] += e[3];
        }
    }
}

/// Adds the join index's moves for one key owned by rank `o`: (key, row) to the owner, index
/// entries to the right rows' holders, their non-key columns (with the left row) to the left
/// rows' holders.
fn add_index(v: &mut [u64], lay: &Layout, by_rank: &[(usize, Summary)], o: usize, sd: &Sides) {
    let Sides { lc, rc, kl, kr, kb } = *sd;
    let mut add = |slot: usize, f: usize, r: usize, x: u64| v[lay.slot(slot, f, r)] += x;
    for &(s, e) in by_rank {
        if s != o {
            let b = (e[0] + e[3]) * (kb + ROW_NUMBER);
            add(INDEX, SENT, s, b);
            add(INDEX, RECV, o, b);
        }
        if s != o && e[3] > 0 {
            add(INDEX, SENT, o, INDEX_ENTRY * e[3] * lc);
            add(INDEX, RECV, s, INDEX_ENTRY * e[3] * lc);
        }
        for &(s1, f) in by_rank.iter().filter(|&&(s1, f)| s1 != s && f[0] > 0) {
            let b = f[0] * (ROW_NUMBER * e[3] + e[5]);
            add(INDEX, SENT, s, b);
            add(INDEX, RECV, s1, b);
        }
        add(
            INDEX,
            ROWS_OUT,
            s,
            e[0] * rc + if kl && rc == 0 { e[0] } else { 0 },
        );
        add(INDEX, ROWS_OUT, s, if kr && lc == 0 { e[3] } else { 0 });
    }
    add(INDEX, ROWS_IN, o, lc + rc);
}

/// The exact inspector (collective); [`crate::inspector::inspect`] runs it or the sketch one.
pub(crate) fn inspect_exact<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &Table,
    lk: &Keys,
    r: &Table,
    rk: &Keys,
    machine: &deinsum_plan::Machine,
) -> Result<Inspection, JoinError> {
    let (me, p) = (comm.rank(), comm.size());
    let lay = Layout { p };
    let mut v = vec![0u64; lay.len()];
    let (lall, rall) = (shape.lall(), shape.rall());
    // Every row's encoded bytes, once (the summaries, the keyed totals and the kept NULL-key
    // rows all add them up).
    let (lbytes, rbytes) = (l.row_sizes(&lall), r.row_sizes(&rall));
    let (keys, sums) = summarize(shape, (l, lk, &lbytes), (r, rk, &rbytes));
    // Summaries to the owners.
    let mut msgs: Vec<Vec<u8>> = vec![Vec::new(); p];
    for (k, s) in keys.iter().zip(&sums) {
        let m = &mut msgs[owner(k, p)];
        m.extend_from_slice(&(k.len() as u32).to_le_bytes());
        m.extend_from_slice(k);
        for x in s {
            m.extend_from_slice(&x.to_le_bytes());
        }
    }
    let distinct = sums.iter().filter(|s| s[0] > 0).count() as u64;
    drop((keys, sums));
    let got = coll::all_to_all(comm, msgs)?;
    // A summary of an 8-byte key takes 4 + 8 + 48 bytes.
    let mut at_owner = AtOwner::new(got.iter().map(Vec::len).sum::<usize>() / 60);
    for (s, buf) in got.iter().enumerate() {
        let mut b = &buf[..];
        while !b.is_empty() {
            let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
            let k = &b[4..4 + n];
            let mut e = [0u64; 6];
            for (j, x) in e.iter_mut().enumerate() {
                let o = 4 + n + 8 * j;
                *x = u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
            }
            at_owner.push(k, s, e);
            b = &b[4 + n + 48..];
        }
    }
    // This rank's own figures, and its rows whose key is NULL (they never move; an outer
    // join keeps them where they are).
    let keyed = |t: &Table, k: &Keys, bytes: &RowSizes| {
        (0..t.rows())
            .filter(|&i| k.get(i).is_some())
            .fold((0u64, 0u64), |(n, b), i| (n + 1, b + bytes.get(i)))
    };
    let (ln, lb) = keyed(l, lk, &lbytes);
    let (rn, rb) = keyed(r, rk, &rbytes);
    // The keyed rows of both tables (for the heavy keys' threshold), and per rank its keyed
    // right rows and distinct left keys.
    let mut pre = vec![0u64; 1 + 2 * p];
    pre[0] = ln + rn;
    pre[1 + me] = rn;
    pre[1 + p + me] = distinct;
    coll::all_sum(comm, &mut pre)?;
    let ranks = owner_view(&at_owner, &pre[1..], heavy_threshold(pre[0], p));
    let mut heavy_msg = Vec::new();
    let mut by_rank = Vec::new();
    for (id, &k) in at_owner.keys().iter().enumerate() {
        by_rank.clear();
        by_rank.extend(at_owner.of(id).copied());
        let by_rank = &by_rank[..];
        if let Some(bl) = add_key(&mut v, &lay, shape, k, me, by_rank, &ranks) {
            heavy_msg.extend_from_slice(&(k.len() as u32).to_le_bytes());
            heavy_msg.extend_from_slice(k);
            heavy_msg.push(bl as u8);
        }
    }
    // Every rank learns the heavy keys (the shuffle routes their rows by them).
    let mut heavy = Vec::new();
    for part in coll::all_gather(comm, &heavy_msg)? {
        let mut b = &part[..];
        while !b.is_empty() {
            let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
            heavy.push((b[4..4 + n].to_vec(), b[4 + n] != 0));
            b = &b[5 + n..];
        }
    }
    for (f, x) in [l.rows() as u64, r.rows() as u64, ln, rn, lb, rb]
        .into_iter()
        .enumerate()
    {
        v[lay.rank(me, f)] = x;
    }
    let (l_null, r_null) = (l.rows() as u64 - ln, r.rows() as u64 - rn);
    let kept = |kl: bool, kr: bool| (if kl { l_null } else { 0 }) + if kr { r_null } else { 0 };
    let kept_here = kept(shape.kind.keeps_left(), shape.kind.keeps_right());
    for slot in 0..SLOTS {
        v[lay.slot(slot, ROWS_OUT, me)] += kept_here;
        v[lay.slot(slot, ROWS_IN, me)] += kept_here;
    }
    let null_bytes = null_key_bytes(shape, (l, lk, &lbytes), (r, rk, &rbytes));
    v[lay.global(1)] += null_bytes;
    coll::all_sum(comm, &mut v)?;
    finish(&v, &lay, shape, machine, heavy, &pre[1 + p..])
}

/// Output bytes of this rank's rows whose key is NULL, where the join kind keeps them (they
/// never move; the other side's columns are NULL, a byte each).
pub(crate) fn null_key_bytes(
    shape: &JoinShape,
    (l, lk, lbytes): (&Table, &Keys, &RowSizes),
    (r, rk, rbytes): (&Table, &Keys, &RowSizes),
) -> u64 {
    let mut b = 0u64;
    if shape.kind.keeps_left() {
        for i in (0..l.rows()).filter(|&i| lk.get(i).is_none()) {
            b += lbytes.get(i) + shape.rrest.len() as u64;
        }
    }
    if shape.kind.keeps_right() {
        for i in (0..r.rows()).filter(|&i| rk.get(i).is_none()) {
            b += rbytes.get(i) + shape.lrest.len() as u64;
        }
    }
    b
}

/// The summaries an owner received, by key: each key's (sending rank, summary) entries in the
/// order received.
struct AtOwner<'a> {
    chains: KeyChains<'a>,
    entries: Vec<(usize, Summary)>,
}

impl<'a> AtOwner<'a> {
    /// Room for about `n` entries.
    fn new(n: usize) -> AtOwner<'a> {
        AtOwner {
            chains: KeyChains::with_capacity(n, n),
            entries: Vec::with_capacity(n),
        }
    }

    /// Files rank `q`'s summary `e` of key `k`.
    fn push(&mut self, k: &'a [u8], q: usize, e: Summary) {
        self.chains.push(k, self.entries.len());
        self.entries.push((q, e));
    }

    /// The distinct keys received.
    fn keys(&self) -> &[&'a [u8]] {
        self.chains.index().keys()
    }

    /// Key `id`'s entries, in the order received.
    fn of(&self, id: usize) -> impl Iterator<Item = &(usize, Summary)> + '_ {
        self.chains.items(id).map(|e| &self.entries[e])
    }
}

/// The owner's [`Ranks`]: `counts` holds every rank's keyed right rows, then every rank's
/// distinct left keys; the stripes take the owner's keys each rank holds on the left.
fn owner_view(at_owner: &AtOwner, counts: &[u64], heavy: u64) -> Ranks {
    let p = counts.len() / 2;
    let mut stripes: Vec<Option<Stripe>> = (0..p)
        .map(|q| (counts[p + q] > 0).then(|| Stripe::new(counts[p + q], p)))
        .collect();
    for (id, &k) in at_owner.keys().iter().enumerate() {
        for (q, s) in at_owner.of(id) {
            if s[0] > 0 {
                if let Some(f) = &mut stripes[*q] {
                    f.insert(k);
                }
            }
        }
    }
    Ranks {
        heavy,
        right_holder: counts[..p].iter().map(|&n| n > 0).collect(),
        stripes: Some(stripes),
    }
}

/// Adds the Bloom semi-join's whole-rank moves to its per-key ones: each rank's filter to
/// every other rank holding keyed right rows, and (a kept right side) one bit back for each
/// right row that came, to its holder. Returns the extra all-to-alls (the flags').
fn bloom_whole(
    sent: &mut [u64],
    received: &mut [u64],
    v: &[u64],
    lay: &Layout,
    ranks: &[RankFigures],
    shape: &JoinShape,
) -> usize {
    let p = lay.p;
    for (q, f) in ranks.iter().enumerate() {
        let fb = filter_bytes(f.left_distinct, p);
        for s in (0..p).filter(|&s| s != q && ranks[s].right_keyed > 0) {
            sent[q] += fb;
            received[s] += fb;
        }
    }
    if !shape.kind.keeps_right() {
        return 0;
    }
    for s in 0..p {
        for q in (0..p).filter(|&q| q != s) {
            let flags = v[lay.pair(s, q)].div_ceil(8);
            sent[q] += flags;
            received[s] += flags;
        }
    }
    1
}

/// Adds to `rows_in` the semi-joins' local passes besides the join. The right holders scan
/// their keyed rows: once to index their keys (one hash insert a row), against every filter
/// that came (a test of each row a filter). Both semi-joins first find each rank's distinct
/// left keys (a hash insert per keyed left row), and the key-list semi-join looks up every
/// key of every list a rank receives (its own included) in its right keys' index, counted
/// as [`SEMI_KEY_ROWS`] rows a key.
fn add_local_passes(
    strategy: Strategy,
    ranks: &[RankFigures],
    distinct: &[u64],
    rows_in: &mut [u64],
) {
    let filters = ranks.iter().filter(|f| f.left_distinct > 0).count() as u64;
    let all_distinct: u64 = distinct.iter().sum();
    for (r, f) in ranks.iter().enumerate() {
        match strategy {
            Strategy::Semi => {
                let listed = if f.right_keyed > 0 {
                    all_distinct
                } else {
                    f.left_distinct
                };
                rows_in[r] += f.right_keyed + f.left_keyed + SEMI_KEY_ROWS * listed;
            }
            Strategy::Bloom => rows_in[r] += f.right_keyed * filters + f.left_keyed,
            _ => {}
        }
    }
}

/// The inspection from the summed figures.
pub(crate) fn finish(
    v: &[u64],
    lay: &Layout,
    shape: &JoinShape,
    machine: &deinsum_plan::Machine,
    heavy: Vec<(Vec<u8>, bool)>,
    distinct: &[u64],
) -> Result<Inspection, JoinError> {
    let p = lay.p;
    let ranks: Vec<RankFigures> = (0..p)
        .map(|r| RankFigures {
            left_rows: v[lay.rank(r, 0)],
            right_rows: v[lay.rank(r, 1)],
            left_keyed: v[lay.rank(r, 2)],
            right_keyed: v[lay.rank(r, 3)],
            left_bytes: v[lay.rank(r, 4)],
            right_bytes: v[lay.rank(r, 5)],
            left_distinct: distinct[r],
        })
        .collect();
    let lbytes: u64 = ranks.iter().map(|f| f.left_bytes).sum();
    let rbytes: u64 = ranks.iter().map(|f| f.right_bytes).sum();
    let broadcast_left = lbytes < rbytes;
    let slot_vec =
        |s: usize, f: usize| -> Vec<u64> { (0..p).map(|r| v[lay.slot(s, f, r)]).collect() };
    let mut predictions = Vec::new();
    for strategy in Strategy::ALL {
        let (slot, calls) = match strategy {
            Strategy::Shuffle => (SHUFFLE, 2),
            Strategy::Broadcast => (if broadcast_left { BCAST_L } else { BCAST_R }, 1),
            Strategy::Semi => (SEMI, 2),
            Strategy::Index => (INDEX, 4),
            Strategy::Bloom => (BLOOM, 2),
        };
        let mut sent = slot_vec(slot, SENT);
        let mut received = slot_vec(slot, RECV);
        let mut rows_in = slot_vec(slot, ROWS_IN);
        let rows_out = slot_vec(slot, ROWS_OUT);
        let mut calls = calls;
        if strategy == Strategy::Broadcast {
            // The broadcast side's keyed rows go to every other rank; the other side's rows
            // stay; a kept broadcast side's match flags go back to their holders, one bit a
            // row (the logical-or reduction).
            let x = |f: &RankFigures| {
                if broadcast_left {
                    f.left_bytes
                } else {
                    f.right_bytes
                }
            };
            let xn = |f: &RankFigures| {
                if broadcast_left {
                    f.left_keyed
                } else {
                    f.right_keyed
                }
            };
            let y = |f: &RankFigures| {
                if broadcast_left {
                    f.right_rows
                } else {
                    f.left_rows
                }
            };
            let total: u64 = ranks.iter().map(x).sum();
            let total_n: u64 = ranks.iter().map(xn).sum();
            let flags = if broadcast_left {
                shape.kind.keeps_left()
            } else {
                shape.kind.keeps_right()
            };
            for (r, f) in ranks.iter().enumerate() {
                sent[r] += (p as u64 - 1) * x(f);
                received[r] += total - x(f);
                rows_in[r] += total_n + y(f);
                if flags {
                    let own = xn(f).div_ceil(8);
                    let others: u64 = ranks
                        .iter()
                        .enumerate()
                        .filter(|&(s, _)| s != r)
                        .map(|(_, g)| xn(g).div_ceil(8))
                        .sum();
                    sent[r] += others;
                    received[r] += (p as u64 - 1) * own;
                }
            }
            if flags {
                calls += 1;
            }
        }
        if strategy == Strategy::Bloom {
            calls += bloom_whole(&mut sent, &mut received, v, lay, &ranks, shape);
        }
        add_local_passes(strategy, &ranks, distinct, &mut rows_in);
        predictions.push(Prediction::new(
            strategy, sent, received, rows_in, rows_out, calls, machine, p,
        ));
    }
    let output_rows = predictions[0].rows_out.iter().sum();
    Ok(Inspection {
        procs: p,
        ranks,
        output_rows,
        output_bytes: v[lay.global(1)],
        broadcast_left,
        predictions,
        heavy_keys: heavy.len(),
        heavy,
        sketch: None,
    })
}
