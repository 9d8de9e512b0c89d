//! The join of tables split by columns ([`crate::Placement::Columns`]): both tables' key
//! columns on the key group of ranks, their other columns on the other group, each group
//! holding a share of the rows in rank order, so a row's number says which rank holds each
//! of its parts.
//!
//! The join index is the only strategy that fits: each key row travels with its row number to
//! the key's owner in the key group (`hash % |K|`), which pairs them; the owner then asks the
//! other columns' holders for exactly the rows of its pairs (row numbers, 8 bytes each) and
//! they send those rows' other columns back (late materialization); the owner assembles the
//! output. A kept row whose key is NULL is asked for by its key's holder, which assembles it.
//!
//! The inspector predicts every rank's bytes exactly: the other columns' holders first tell
//! the key holders the encoded size of each of their rows (run-length coded, so a table of
//! fixed-width columns costs a few bytes), then per-key summaries go to the owners as in
//! [`crate::inspect`].

use crate::coll;
use crate::cost::{Prediction, Strategy};
use crate::dist::JoinOptions;
use crate::inspect::{Inspection, RankFigures};
use crate::kernel::{hash_join, key_hash, JoinShape, KeyMap, Keys};
use crate::placement::Placement;
use crate::{Column, JoinError, RankJoin, Table};
use deinsum_exec::{Communicator, Traffic};
use std::ops::Range;

/// All-to-all calls of the join: key rows (left, right), requests (left, right), other
/// columns back (left, right).
const CALLS: usize = 6;
/// Bytes of a row number in a key row or a request.
const ROW: u64 = 8;

/// What one rank holds of one table split by columns.
#[derive(Clone, Debug)]
pub struct ColumnPart {
    /// The key columns of its share of the rows (no rows outside the key group).
    pub keys: Table,
    /// The other columns of its share of the rows (no rows outside the other group).
    pub rest: Table,
    /// Rows of `rest` (a table of no other columns has rows all the same).
    pub rest_rows: usize,
}

impl ColumnPart {
    /// What `rank` of `p` keeps of `t`, its share of a table as [`Placement::slice`] reads
    /// it: the key columns `keys` in the key group, the other columns `rest` in the other
    /// (one rank: both).
    pub fn split(t: &Table, keys: &[usize], rest: &[usize], rank: usize, p: usize) -> ColumnPart {
        let (kg, vg) = Placement::Columns.groups(p);
        let pick = |cols: &[usize], keep: bool| {
            let s = t.select(cols);
            if keep {
                s
            } else {
                s.empty_like()
            }
        };
        ColumnPart {
            keys: pick(keys, kg.contains(&rank)),
            rest: pick(rest, vg.contains(&rank)),
            rest_rows: if vg.contains(&rank) { t.rows() } else { 0 },
        }
    }
}

/// One table's layout over the two groups, the same on every rank.
struct Side<'a> {
    part: &'a ColumnPart,
    /// First row of each key-group rank's share, and the end.
    kstart: Vec<u64>,
    /// First row of each other-group rank's share, and the end.
    vstart: Vec<u64>,
    /// Whether the table has other columns (else nothing is asked for).
    payload: bool,
}

/// The first row of each rank's share in `group`, and the end, from every rank's `rows`.
fn starts(rows: &[u64], group: &Range<usize>) -> Vec<u64> {
    let mut v = vec![0u64];
    for q in group.clone() {
        v.push(v[v.len() - 1] + rows[q]);
    }
    v
}

impl Side<'_> {
    /// The other-group index holding row `g`.
    fn holder(&self, g: u64) -> usize {
        self.vstart.partition_point(|&s| s <= g) - 1
    }
}

/// Ranks of the two groups, and this rank.
struct Groups {
    k: Range<usize>,
    v: Range<usize>,
    me: usize,
    p: usize,
}

impl Groups {
    /// The owner (a key-group rank) of key `k`.
    fn owner(&self, k: &[u8]) -> usize {
        self.k.start + (key_hash(k) % self.k.len() as u64) as usize
    }
    /// This rank's first key row (its share's start), if it is in the key group.
    fn key_first(&self, s: &Side) -> u64 {
        if self.k.contains(&self.me) {
            s.kstart[self.me - self.k.start]
        } else {
            0
        }
    }
    /// This rank's first other-columns row, if it is in the other group.
    fn rest_first(&self, s: &Side) -> u64 {
        if self.v.contains(&self.me) {
            s.vstart[self.me - self.v.start]
        } else {
            0
        }
    }
}

/// Per-rank figures being added up: sent, received, rows in, rows out; then output rows and
/// bytes.
struct Figures {
    p: usize,
    v: Vec<u64>,
}

impl Figures {
    fn new(p: usize) -> Figures {
        Figures {
            p,
            v: vec![0; 4 * p + 2],
        }
    }
    /// `b` bytes from `s` to `r` (nothing when they are one rank).
    fn moved(&mut self, s: usize, r: usize, b: u64) {
        if s != r {
            self.v[s] += b;
            self.v[self.p + r] += b;
        }
    }
    fn rows(&mut self, r: usize, rows_in: u64, rows_out: u64) {
        self.v[2 * self.p + r] += rows_in;
        self.v[3 * self.p + r] += rows_out;
    }
    fn output(&mut self, rows: u64, bytes: u64) {
        self.v[4 * self.p] += rows;
        self.v[4 * self.p + 1] += bytes;
    }
}

/// Sizes of the other columns' rows to the key holders of the same rows, as runs of
/// (count u32, size u32); returns this key holder's sizes, one per key row.
fn sizes_to_key_holders<C: Communicator>(
    comm: &C,
    g: &Groups,
    s: &Side,
) -> Result<Vec<u32>, JoinError> {
    let mut msgs = vec![Vec::new(); g.p];
    if s.payload && g.v.contains(&g.me) {
        let first = g.rest_first(s);
        let all: Vec<usize> = (0..s.part.rest.names().len()).collect();
        let last = first + s.part.rest_rows as u64;
        for (i, q) in g.k.clone().enumerate() {
            let (lo, hi) = (s.kstart[i].max(first), s.kstart[i + 1].min(last));
            let mut run: Option<(u32, u32)> = None;
            for row in lo..hi {
                let size = s.part.rest.row_bytes((row - first) as usize, &all) as u32;
                run = match run {
                    Some((c, z)) if z == size => Some((c + 1, z)),
                    Some((c, z)) => {
                        msgs[q].extend_from_slice(&c.to_le_bytes());
                        msgs[q].extend_from_slice(&z.to_le_bytes());
                        Some((1, size))
                    }
                    None => Some((1, size)),
                };
            }
            if let Some((c, z)) = run {
                msgs[q].extend_from_slice(&c.to_le_bytes());
                msgs[q].extend_from_slice(&z.to_le_bytes());
            }
        }
    }
    let got = coll::all_to_all(comm, msgs)?;
    let mut sizes = Vec::with_capacity(s.part.keys.rows());
    for m in got {
        for run in m.chunks_exact(8) {
            let c = u32::from_le_bytes(run[..4].try_into().expect("4"));
            let z = u32::from_le_bytes(run[4..].try_into().expect("4"));
            sizes.extend(std::iter::repeat_n(z, c as usize));
        }
    }
    if !s.payload {
        sizes = vec![0; s.part.keys.rows()];
    }
    Ok(sizes)
}

/// One key's rows on one key holder: rows and key-cell bytes, and per other-group holder
/// (index) its rows and their other columns' bytes.
#[derive(Clone, Debug, Default)]
struct KeySummary {
    rows: u64,
    key_bytes: u64,
    by_holder: Vec<(u32, u64, u64)>,
}

/// This key holder's per-key summaries of one table (`sizes`: its rows' other columns'
/// bytes); its NULL-key rows, when kept (`kept_null`: the other table's other columns, NULL
/// in their output rows), are added to `fig` directly.
fn summarize<'a>(
    g: &Groups,
    s: &Side,
    k: &'a Keys,
    sizes: &[u32],
    kept_null: Option<usize>,
    fig: &mut Figures,
) -> KeyMap<'a, KeySummary> {
    let mut m: KeyMap<KeySummary> = KeyMap::default();
    let first = g.key_first(s);
    let all: Vec<usize> = (0..s.part.keys.names().len()).collect();
    for (i, &size) in sizes.iter().enumerate().take(k.len()) {
        let row = first + i as u64;
        let h = s.holder(row);
        match k.get(i) {
            Some(key) => {
                let e = m.entry(key).or_default();
                e.rows += 1;
                e.key_bytes += s.part.keys.row_bytes(i, &all) as u64;
                match e.by_holder.last_mut() {
                    Some(last) if last.0 == h as u32 => {
                        last.1 += 1;
                        last.2 += size as u64;
                    }
                    _ => e.by_holder.push((h as u32, 1, size as u64)),
                }
            }
            None if kept_null.is_some() => {
                let nulls = kept_null.unwrap_or(0) as u64;
                let bytes = s.part.keys.row_bytes(i, &all) as u64 + size as u64 + nulls;
                fig.output(1, bytes);
                if s.payload {
                    fig.moved(g.me, g.v.start + h, ROW);
                    fig.moved(g.v.start + h, g.me, size as u64);
                }
                fig.rows(g.me, 1, 1);
            }
            None => {}
        }
    }
    m
}

/// Appends a summary to a message.
fn put_summary(m: &mut Vec<u8>, k: &[u8], e: &KeySummary) {
    m.extend_from_slice(&(k.len() as u32).to_le_bytes());
    m.extend_from_slice(k);
    for x in [e.rows, e.key_bytes, e.by_holder.len() as u64] {
        m.extend_from_slice(&x.to_le_bytes());
    }
    for &(h, r, b) in &e.by_holder {
        m.extend_from_slice(&h.to_le_bytes());
        m.extend_from_slice(&r.to_le_bytes());
        m.extend_from_slice(&b.to_le_bytes());
    }
}

/// Reads a summary from the front of `b`.
fn get_summary<'a>(b: &mut &'a [u8]) -> (&'a [u8], KeySummary) {
    let buf: &'a [u8] = b;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
    let n = u32::from_le_bytes(buf[..4].try_into().expect("4")) as usize;
    let k = &buf[4..4 + n];
    let (rows, key_bytes, m) = (
        u64_at(buf, 4 + n),
        u64_at(buf, 12 + n),
        u64_at(buf, 20 + n) as usize,
    );
    let mut at = 28 + n;
    let mut by_holder = Vec::with_capacity(m);
    for _ in 0..m {
        let h = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4"));
        by_holder.push((h, u64_at(buf, at + 4), u64_at(buf, at + 12)));
        at += 20;
    }
    *b = &buf[at..];
    (
        k,
        KeySummary {
            rows,
            key_bytes,
            by_holder,
        },
    )
}

/// One key's summaries by key holder, left and right, at its owner.
type AtOwner = (Vec<(usize, KeySummary)>, Vec<(usize, KeySummary)>);

/// Adds what the join moves and produces for one key at its owner `o`.
fn add_key(fig: &mut Figures, g: &Groups, shape: &JoinShape, o: usize, sides: &AtOwner) {
    let (kl, kr) = (shape.kind.keeps_left(), shape.kind.keeps_right());
    let count = |v: &[(usize, KeySummary)]| v.iter().map(|(_, e)| e.rows).sum::<u64>();
    let (lc, rc) = (count(&sides.0), count(&sides.1));
    let bytes = |v: &[(usize, KeySummary)]| {
        v.iter()
            .map(|(_, e)| e.key_bytes + e.by_holder.iter().map(|h| h.2).sum::<u64>())
            .sum::<u64>()
    };
    let (lb, rb) = (bytes(&sides.0), bytes(&sides.1));
    let rrest = |v: &[(usize, KeySummary)]| {
        v.iter()
            .flat_map(|(_, e)| e.by_holder.iter().map(|h| h.2))
            .sum::<u64>()
    };
    let (l_un, r_un) = (kl && rc == 0, kr && lc == 0);
    let mut out_rows = lc * rc;
    let mut out_bytes = lb * rc + rrest(&sides.1) * lc;
    if l_un {
        out_rows += lc;
        out_bytes += lb + shape.rrest.len() as u64 * lc;
    }
    if r_un {
        out_rows += rc;
        out_bytes += rb + shape.lrest.len() as u64 * rc;
    }
    fig.output(out_rows, out_bytes);
    fig.rows(o, lc + rc, out_rows);
    let asked = [
        (&sides.0, rc > 0 || kl, !shape.lrest.is_empty()),
        (&sides.1, lc > 0 || kr, !shape.rrest.is_empty()),
    ];
    for (v, wanted, payload) in asked {
        for (s, e) in v.iter() {
            fig.moved(*s, o, e.rows * ROW + e.key_bytes);
            if !(wanted && payload) {
                continue;
            }
            for &(h, rows, b) in &e.by_holder {
                let holder = g.v.start + h as usize;
                fig.moved(o, holder, rows * ROW);
                fig.moved(holder, o, b);
            }
        }
    }
}

/// The inspector of tables split by columns (collective): the join index's bytes per rank.
fn inspect_columns<C: Communicator>(
    comm: &C,
    g: &Groups,
    shape: &JoinShape,
    sides: (&Side, &Side),
    keys: (&Keys, &Keys),
    machine: &deinsum_plan::Machine,
) -> Result<Inspection, JoinError> {
    let p = g.p;
    let mut fig = Figures::new(p);
    let lsizes = sizes_to_key_holders(comm, g, sides.0)?;
    let rsizes = sizes_to_key_holders(comm, g, sides.1)?;
    let kind = shape.kind;
    let (lnull, rnull) = (
        kind.keeps_left().then_some(shape.rrest.len()),
        kind.keeps_right().then_some(shape.lrest.len()),
    );
    let lsum = summarize(g, sides.0, keys.0, &lsizes, lnull, &mut fig);
    let rsum = summarize(g, sides.1, keys.1, &rsizes, rnull, &mut fig);
    drop((lsizes, rsizes));
    let mut msgs = vec![Vec::new(); p];
    for (m, side) in [(&lsum, 0u8), (&rsum, 1u8)] {
        for (k, e) in m {
            let buf = &mut msgs[g.owner(k)];
            buf.push(side);
            put_summary(buf, k, e);
        }
    }
    let got = coll::all_to_all(comm, msgs)?;
    let mut at: KeyMap<AtOwner> = KeyMap::default();
    for (q, buf) in got.iter().enumerate() {
        let mut b = &buf[..];
        while !b.is_empty() {
            let side = b[0];
            b = &b[1..];
            let (k, e) = get_summary(&mut b);
            let slot = at.entry(k).or_default();
            if side == 0 {
                slot.0.push((q, e));
            } else {
                slot.1.push((q, e));
            }
        }
    }
    for v in at.values() {
        add_key(&mut fig, g, shape, g.me, v);
    }
    let mut held = vec![0u64; 2 * p];
    held[g.me] = keys.0.len().max(sides.0.part.rest_rows) as u64;
    held[p + g.me] = keys.1.len().max(sides.1.part.rest_rows) as u64;
    coll::all_sum(comm, &mut fig.v)?;
    coll::all_sum(comm, &mut held)?;
    let v = &fig.v;
    let per = |f: usize| v[f * p..(f + 1) * p].to_vec();
    let pred = Prediction::new(
        Strategy::Index,
        per(0),
        per(1),
        per(2),
        per(3),
        CALLS,
        machine,
        p,
    );
    Ok(Inspection {
        procs: p,
        ranks: (0..p)
            .map(|r| RankFigures {
                left_rows: held[r],
                right_rows: held[p + r],
                ..RankFigures::default()
            })
            .collect(),
        output_rows: v[4 * p],
        output_bytes: v[4 * p + 1],
        broadcast_left: false,
        predictions: vec![pred],
        heavy_keys: 0,
        heavy: Vec::new(),
        sketch: None,
    })
}

/// This key holder's keyed rows of one table, as (key cells, row number), to their owners.
fn key_rows_to_owners(g: &Groups, s: &Side, k: &Keys) -> Vec<Vec<u8>> {
    let mut msgs = vec![Vec::new(); g.p];
    let first = g.key_first(s);
    let all: Vec<usize> = (0..s.part.keys.names().len()).collect();
    for i in 0..k.len() {
        if let Some(key) = k.get(i) {
            let m = &mut msgs[g.owner(key)];
            s.part.keys.encode_row(i, &all, m);
            m.extend_from_slice(&(first + i as u64).to_le_bytes());
        }
    }
    msgs
}

/// The key rows an owner received: their key columns and row numbers.
fn read_key_rows(part: &ColumnPart, got: &[Vec<u8>]) -> Result<(Table, Vec<u64>), JoinError> {
    let mut cols: Vec<Column> = part.keys.empty_like().into_parts().1;
    let mut rows = Vec::new();
    for m in got {
        let mut b = &m[..];
        while !b.is_empty() {
            for c in &mut cols {
                c.decode_push(&mut b).map_err(JoinError::Invalid)?;
            }
            rows.push(u64::from_le_bytes(b[..8].try_into().expect("8")));
            b = &b[8..];
        }
    }
    let t = Table::new(part.keys.names().to_vec(), cols).map_err(JoinError::Invalid)?;
    Ok((t, rows))
}

/// The rows this rank asks one table's other-columns holders for (`need`: row numbers, in
/// order), and where each lands in the table of what comes back.
fn ask<C: Communicator>(
    comm: &C,
    g: &Groups,
    s: &Side,
    need: &[u64],
) -> Result<(Table, Vec<usize>), JoinError> {
    let mut msgs = vec![Vec::new(); g.p];
    let mut at = Vec::with_capacity(need.len());
    let mut per = vec![0usize; g.v.len()];
    for &row in need {
        let h = s.holder(row);
        msgs[g.v.start + h].extend_from_slice(&(row - s.vstart[h]).to_le_bytes());
        at.push((h, per[h]));
        per[h] += 1;
    }
    let asked = coll::all_to_all(comm, msgs)?;
    let all: Vec<usize> = (0..s.part.rest.names().len()).collect();
    let answers: Vec<Vec<u8>> = asked
        .iter()
        .map(|m| {
            let mut out = Vec::new();
            for r in m.chunks_exact(8) {
                let i = u64::from_le_bytes(r.try_into().expect("8")) as usize;
                s.part.rest.encode_row(i, &all, &mut out);
            }
            out
        })
        .collect();
    drop(asked);
    let got = coll::all_to_all(comm, answers)?;
    let types = s.part.rest.dtypes();
    let parts: Vec<Table> =
        g.v.clone()
            .map(|q| Table::decode(s.part.rest.names(), &types, &got[q]))
            .collect::<Result<_, _>>()
            .map_err(JoinError::Invalid)?;
    let offs: Vec<usize> = parts
        .iter()
        .scan(0, |o, t| {
            let here = *o;
            *o += t.rows();
            Some(here)
        })
        .collect();
    let slots = at.into_iter().map(|(h, i)| offs[h] + i).collect();
    let all_rows = if parts.is_empty() {
        s.part.rest.empty_like()
    } else {
        Table::concat(&parts).map_err(JoinError::Invalid)?
    };
    Ok((all_rows, slots))
}

/// What [`fetch`] got: the other columns that came back, the row in them of each received
/// key row (`None`: not asked for), and of each kept NULL-key row.
type Fetched = (Table, Vec<Option<usize>>, Vec<usize>);

/// The rows asked for of one table: the received key rows `idx` (in pairs) by row number,
/// then this rank's kept NULL-key rows; returns the other columns that came back and, per
/// received key row and per NULL-key row, its row in them.
fn fetch<C: Communicator>(
    comm: &C,
    g: &Groups,
    s: &Side,
    got_rows: &[u64],
    used: &[bool],
    nulls: &[usize],
) -> Result<Fetched, JoinError> {
    let first = g.key_first(s);
    let mut need: Vec<u64> = Vec::new();
    let mut slot_of: Vec<Option<usize>> = vec![None; got_rows.len()];
    if s.payload {
        for (i, &row) in got_rows.iter().enumerate() {
            if used[i] {
                slot_of[i] = Some(need.len());
                need.push(row);
            }
        }
        need.extend(nulls.iter().map(|&i| first + i as u64));
    }
    let (t, slots) = ask(comm, g, s, &need)?;
    let (pair_slots, null_slots) = if s.payload {
        let n = slot_of.iter().flatten().count();
        for x in slot_of.iter_mut().flatten() {
            *x = slots[*x];
        }
        (slot_of, slots[n..].to_vec())
    } else {
        (slot_of, Vec::new())
    };
    Ok((t, pair_slots, null_slots))
}

/// A side's other columns at `rows` (`None`: NULL), or NULL columns of their types when the
/// side has none to fetch.
fn rest_cols(shape_types: &[crate::DataType], t: &Table, rows: &[Option<usize>]) -> Vec<Column> {
    if t.names().is_empty() {
        return shape_types
            .iter()
            .map(|&ty| Column::nulls(ty, rows.len()))
            .collect();
    }
    t.columns().iter().map(|c| c.take(rows)).collect()
}

/// Joins tables split by columns (collective; see the module's documentation): `l` and `r`
/// are this rank's parts as [`ColumnPart::split`] keeps them. `opts.strategy` must be the
/// join index or `None`.
pub fn join_columns<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &ColumnPart,
    r: &ColumnPart,
    opts: &JoinOptions,
) -> Result<RankJoin, JoinError> {
    exact_only(opts.inspect)?;
    if let Some(s) = opts.strategy.filter(|&s| s != Strategy::Index) {
        return Err(JoinError::Invalid(format!(
            "tables split by columns (--placement columns) are joined by the join index; \
             --strategy {} needs them split by rows",
            s.name()
        )));
    }
    let start = std::time::Instant::now();
    let t0 = comm.traffic();
    let (ins, ctx) = prepare(comm, shape, l, r, &opts.machine)?;
    let t1 = comm.traffic();
    if let Some(limit) = opts.output_limit {
        if ins.output_bytes > limit {
            return Err(JoinError::TooLarge {
                rows: ins.output_rows,
                bytes: ins.output_bytes,
                limit,
            });
        }
    }
    let table = run(comm, shape, &ctx)?;
    let t2 = comm.traffic();
    let diff = |a: Traffic, b: Traffic| Traffic {
        sent: b.sent - a.sent,
        received: b.received - a.received,
    };
    Ok(RankJoin {
        table,
        inspection: ins,
        strategy: Strategy::Index,
        measured: diff(t1, t2),
        inspector: diff(t0, t1),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Refuses a forced sketch inspector on tables split by columns: that layout's inspector is
/// exact only (its key lists are the small part already), and a mode asked for is never ignored.
pub fn exact_only(mode: crate::InspectMode) -> Result<(), JoinError> {
    if mode == crate::InspectMode::Sketch {
        return Err(JoinError::Invalid(
            "--inspect sketch is not built for tables split by columns (--placement columns), \
             whose inspector is exact; use --inspect exact or auto"
                .into(),
        ));
    }
    Ok(())
}

/// The inspection alone (collective): the join index's predicted bytes per rank.
pub fn explain_columns<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &ColumnPart,
    r: &ColumnPart,
    machine: &deinsum_plan::Machine,
) -> Result<Inspection, JoinError> {
    Ok(prepare(comm, shape, l, r, machine)?.0)
}

/// The layouts and keys of both tables, as the join's steps use them.
struct Ctx<'a> {
    g: Groups,
    l: Side<'a>,
    r: Side<'a>,
    lk: Keys,
    rk: Keys,
}

/// The tables' sizes (collective), their layouts and keys, and the inspection.
fn prepare<'a, C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &'a ColumnPart,
    r: &'a ColumnPart,
    machine: &deinsum_plan::Machine,
) -> Result<(Inspection, Ctx<'a>), JoinError> {
    let p = comm.size();
    let (k, v) = Placement::Columns.groups(p);
    let g = Groups {
        k,
        v,
        me: comm.rank(),
        p,
    };
    // Every rank's rows of each part: the groups read the files in rank order (CSV byte
    // ranges need not hold equal rows), so a row's number is its rank's start plus its index.
    let mut n = vec![0u64; 4 * p];
    for (f, x) in [l.keys.rows(), l.rest_rows, r.keys.rows(), r.rest_rows]
        .into_iter()
        .enumerate()
    {
        n[f * p + g.me] = x as u64;
    }
    coll::all_sum(comm, &mut n)?;
    let side = |part: &'a ColumnPart, f: usize, rest: &[usize]| Side {
        part,
        kstart: starts(&n[f * p..(f + 1) * p], &g.k),
        vstart: starts(&n[(f + 1) * p..(f + 2) * p], &g.v),
        payload: !rest.is_empty(),
    };
    let (ls, rs) = (side(l, 0, &shape.lrest), side(r, 2, &shape.rrest));
    if ls.kstart.last() != ls.vstart.last() || rs.kstart.last() != rs.vstart.last() {
        return Err(JoinError::Invalid(
            "the key columns and the other columns of a table have different rows".into(),
        ));
    }
    let nk = shape.lkeys.len();
    let lk = Keys::of(&l.keys, &(0..nk).collect::<Vec<_>>());
    let rk = Keys::of(&r.keys, &(0..nk).collect::<Vec<_>>());
    let ins = inspect_columns(comm, &g, shape, (&ls, &rs), (&lk, &rk), machine)?;
    Ok((
        ins,
        Ctx {
            g,
            l: ls,
            r: rs,
            lk,
            rk,
        },
    ))
}

/// The join's moves: key rows to the owners, the index, requests, other columns back, and the
/// assembly of the owner's pairs and the key holder's kept NULL-key rows.
fn run<C: Communicator>(comm: &C, shape: &JoinShape, c: &Ctx) -> Result<Table, JoinError> {
    let g = &c.g;
    let lgot = coll::all_to_all(comm, key_rows_to_owners(g, &c.l, &c.lk))?;
    let rgot = coll::all_to_all(comm, key_rows_to_owners(g, &c.r, &c.rk))?;
    let (lkt, lrows) = read_key_rows(c.l.part, &lgot)?;
    let (rkt, rrows) = read_key_rows(c.r.part, &rgot)?;
    drop((lgot, rgot));
    let all: Vec<usize> = (0..lkt.names().len()).collect();
    let (lk, rk) = (Keys::of(&lkt, &all), Keys::of(&rkt, &all));
    let kind = shape.kind;
    let (pairs, _, _) = hash_join(&lk, &rk, kind.keeps_left(), kind.keeps_right());
    let mut lused = vec![false; lrows.len()];
    let mut rused = vec![false; rrows.len()];
    for (a, b) in pairs.iter() {
        if let Some(i) = a {
            lused[i] = true;
        }
        if let Some(j) = b {
            rused[j] = true;
        }
    }
    let nulls = |k: &Keys, keep: bool| -> Vec<usize> {
        if keep {
            (0..k.len()).filter(|&i| k.get(i).is_none()).collect()
        } else {
            Vec::new()
        }
    };
    let (lnull, rnull) = (
        nulls(&c.lk, kind.keeps_left()),
        nulls(&c.rk, kind.keeps_right()),
    );
    let (lt, lslot, lnslot) = fetch(comm, g, &c.l, &lrows, &lused, &lnull)?;
    let (rt, rslot, rnslot) = fetch(comm, g, &c.r, &rrows, &rused, &rnull)?;
    let ltypes: Vec<_> = shape.lrest.iter().map(|&i| shape.lschema.1[i]).collect();
    let rtypes: Vec<_> = shape.rrest.iter().map(|&i| shape.rschema.1[i]).collect();
    let assemble = |keys: Vec<Column>, lrows: &[Option<usize>], rrows: &[Option<usize>]| {
        let mut cols = keys;
        cols.extend(rest_cols(&ltypes, &lt, lrows));
        cols.extend(rest_cols(&rtypes, &rt, rrows));
        Table::new(shape.names.clone(), cols).map_err(JoinError::Invalid)
    };
    // The owner's pairs.
    let li: Vec<Option<usize>> = pairs.iter().map(|x| x.0).collect();
    let ri: Vec<Option<usize>> = pairs.iter().map(|x| x.1).collect();
    let keys: Vec<Column> = (0..all.len())
        .map(|k| {
            lkt.columns()[k]
                .take(&li)
                .coalesce(&rkt.columns()[k].take(&ri))
        })
        .collect();
    let lr: Vec<Option<usize>> = li.iter().map(|i| i.and_then(|i| lslot[i])).collect();
    let rr: Vec<Option<usize>> = ri.iter().map(|j| j.and_then(|j| rslot[j])).collect();
    let mut out = vec![assemble(keys, &lr, &rr)?];
    // The key holder's kept NULL-key rows.
    let none = |n: usize| vec![None; n];
    let lsome: Vec<Option<usize>> = lnull.iter().map(|&i| Some(i)).collect();
    let keys: Vec<Column> =
        c.l.part
            .keys
            .columns()
            .iter()
            .map(|k| k.take(&lsome))
            .collect();
    let lr: Vec<Option<usize>> = lnslot.into_iter().map(Some).collect();
    let lr = if lr.is_empty() { none(lnull.len()) } else { lr };
    out.push(assemble(keys, &lr, &none(lnull.len()))?);
    let rsome: Vec<Option<usize>> = rnull.iter().map(|&j| Some(j)).collect();
    let keys: Vec<Column> =
        c.r.part
            .keys
            .columns()
            .iter()
            .map(|k| k.take(&rsome))
            .collect();
    let rr: Vec<Option<usize>> = rnslot.into_iter().map(Some).collect();
    let rr = if rr.is_empty() { none(rnull.len()) } else { rr };
    out.push(assemble(keys, &none(rnull.len()), &rr)?);
    Table::concat(&out).map_err(JoinError::Invalid)
}
