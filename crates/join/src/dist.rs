//! The distributed join on tables split by rows: each rank holds some rows of each table and
//! ends with some rows of the output. Every byte moves through [`coll::all_to_all`], so the
//! communicator counts it, and each strategy moves exactly what [`crate::inspect`] predicted.

use crate::bloom::Bloom;
use crate::coll;
use crate::cost::Strategy;
use crate::inspect::{InspectMode, Inspection};
use crate::inspector::inspect;
use crate::kernel::{
    assemble, hash_join, key_hash, owner, JoinShape, KeyIndex, KeyMap, Keys, Pairs,
};
use crate::{Column, JoinError, Table};
use deinsum_exec::{Communicator, Traffic};

/// How to run a join.
#[derive(Clone, Debug)]
pub struct JoinOptions {
    /// The strategy, or `None` for the least predicted time.
    pub strategy: Option<Strategy>,
    /// The machine the time is predicted on.
    pub machine: deinsum_plan::Machine,
    /// Refuse outputs over this many (encoded) bytes, before any row moves.
    pub output_limit: Option<u64>,
    /// How the inspector gathers its figures (`Auto` with an output limit: exact, since the
    /// refusal needs the output's size).
    pub inspect: InspectMode,
}

/// One rank's result of a distributed join.
#[derive(Clone, Debug)]
pub struct RankJoin {
    /// This rank's output rows.
    pub table: Table,
    /// The inspector's figures (the same on every rank).
    pub inspection: Inspection,
    /// The strategy that ran.
    pub strategy: Strategy,
    /// Bytes this rank moved while the strategy ran (the inspector's excluded).
    pub measured: Traffic,
    /// Bytes this rank moved in the inspector pass.
    pub inspector: Traffic,
    /// Wall seconds of this rank's join, the inspector pass included.
    pub seconds: f64,
}

fn diff(a: Traffic, b: Traffic) -> Traffic {
    Traffic {
        sent: b.sent - a.sent,
        received: b.received - a.received,
    }
}

/// The strategy `auto` takes: the least predicted seconds (the first of equals).
pub fn choose(ins: &Inspection) -> Strategy {
    let mut best = &ins.predictions[0];
    for p in &ins.predictions {
        if p.seconds < best.seconds {
            best = p;
        }
    }
    best.strategy
}

/// Joins this rank's rows `l` and `r` with the other ranks' (collective).
pub fn join<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &Table,
    r: &Table,
    opts: &JoinOptions,
) -> Result<RankJoin, JoinError> {
    let start = std::time::Instant::now();
    let (lk, rk) = (Keys::of(l, &shape.lkeys), Keys::of(r, &shape.rkeys));
    let t0 = comm.traffic();
    let mode = match (opts.inspect, opts.output_limit) {
        (InspectMode::Auto, Some(_)) => InspectMode::Exact,
        (m, _) => m,
    };
    let inspection = inspect(comm, shape, l, &lk, r, &rk, &opts.machine, mode)?;
    let t1 = comm.traffic();
    if let Some(limit) = opts.output_limit {
        if inspection.output_bytes > limit {
            return Err(JoinError::TooLarge {
                rows: inspection.output_rows,
                bytes: inspection.output_bytes,
                limit,
            });
        }
    }
    let strategy = opts.strategy.unwrap_or_else(|| choose(&inspection));
    let side = Sides {
        shape,
        l,
        lk: &lk,
        r,
        rk: &rk,
    };
    let table = match strategy {
        Strategy::Shuffle => shuffle(comm, &side, &inspection.heavy)?,
        Strategy::Broadcast => broadcast(comm, &side, inspection.broadcast_left)?,
        Strategy::Semi => semi(comm, &side, &inspection)?,
        Strategy::Index => index(comm, &side)?,
        Strategy::Bloom => bloom(comm, &side, &inspection)?,
    };
    let t2 = comm.traffic();
    Ok(RankJoin {
        table,
        inspection,
        strategy,
        measured: diff(t1, t2),
        inspector: diff(t0, t1),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// [`join`] `runs` times (at least once) on the same tables, as a database times a query it
/// runs again: each run starts together on every rank (a barrier) and the previous run's output
/// is dropped first, so later runs reuse its memory. Returns the last run and every run's
/// slowest-rank seconds (the same list on every rank; collective).
pub fn join_repeated<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &Table,
    r: &Table,
    opts: &JoinOptions,
    runs: usize,
) -> Result<(RankJoin, Vec<f64>), JoinError> {
    let mut last: Option<RankJoin> = None;
    let mut mine = Vec::with_capacity(runs.max(1) * 8);
    for _ in 0..runs.max(1) {
        drop(last.take());
        comm.barrier()?;
        let run = join(comm, shape, l, r, opts)?;
        mine.extend_from_slice(&run.seconds.to_le_bytes());
        last = Some(run);
    }
    let mut slowest = vec![0.0f64; runs.max(1)];
    for theirs in crate::coll::all_gather(comm, &mine)? {
        for (s, b) in slowest.iter_mut().zip(theirs.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            *s = s.max(f64::from_le_bytes(w));
        }
    }
    let run = last.ok_or_else(|| JoinError::Invalid("a join ran no time".into()))?;
    Ok((run, slowest))
}

/// This rank's two tables and their keys.
struct Sides<'a> {
    shape: &'a JoinShape,
    l: &'a Table,
    lk: &'a Keys,
    r: &'a Table,
    rk: &'a Keys,
}

impl Sides<'_> {
    /// The output rows of the rows whose key is NULL, where the join kind keeps them.
    fn null_key_rows(&self) -> Table {
        let kind = self.shape.kind;
        let mut pairs = Pairs::new();
        if kind.keeps_left() {
            pairs.extend(
                (0..self.l.rows())
                    .filter(|&i| self.lk.get(i).is_none())
                    .map(|i| (Some(i), None)),
            );
        }
        if kind.keeps_right() {
            pairs.extend(
                (0..self.r.rows())
                    .filter(|&j| self.rk.get(j).is_none())
                    .map(|j| (None, Some(j))),
            );
        }
        assemble(self.shape, self.l, self.r, &pairs)
    }

    fn decode_left(&self, bytes: &[u8]) -> Result<Table, JoinError> {
        Table::decode(&self.shape.lschema.0, &self.shape.lschema.1, bytes)
            .map_err(JoinError::Invalid)
    }

    fn decode_right(&self, bytes: &[u8]) -> Result<Table, JoinError> {
        Table::decode(&self.shape.rschema.0, &self.shape.rschema.1, bytes)
            .map_err(JoinError::Invalid)
    }
}

fn concat(parts: Vec<Table>) -> Result<Table, JoinError> {
    Table::concat_owned(parts).map_err(JoinError::Invalid)
}

/// Where a shuffle sends each keyed row of one side (`left`) of `t`: to its key's owner, or
/// for a heavy key (in `heavy`: whether its left side is broadcast) to every rank (this one
/// included, handed over) when this side is broadcast, else nowhere (the row stays; its
/// number is returned).
fn route_rows(
    t: &Table,
    k: &Keys,
    p: usize,
    heavy: &KeyMap<bool>,
    left: bool,
) -> (Vec<Vec<u8>>, Vec<usize>) {
    let all: Vec<usize> = (0..t.names().len()).collect();
    let mut msgs = vec![Vec::new(); p];
    let mut stay = Vec::new();
    let mut row = Vec::new();
    for i in 0..t.rows() {
        let Some(key) = k.get(i) else { continue };
        match heavy.get(key) {
            None => t.encode_row(i, &all, &mut msgs[owner(key, p)]),
            Some(&bl) if bl == left => {
                row.clear();
                t.encode_row(i, &all, &mut row);
                for m in &mut msgs {
                    m.extend_from_slice(&row);
                }
            }
            Some(_) => stay.push(i),
        }
    }
    (msgs, stay)
}

/// Shuffle: both tables to the keys' owners, then a local join of what each owner holds. A
/// heavy key's broadcast side reaches every rank and its other side stays, so its pairs are
/// made where the staying rows are; a broadcast row is never unmatched (its key's other side
/// has rows, or it would be the side broadcast), so only the staying rows can be.
fn shuffle<C: Communicator>(
    comm: &C,
    s: &Sides,
    heavy: &[(Vec<u8>, bool)],
) -> Result<Table, JoinError> {
    let p = comm.size();
    let heavy: KeyMap<bool> = heavy.iter().map(|(k, b)| (&k[..], *b)).collect();
    let (lmsgs, lstay) = route_rows(s.l, s.lk, p, &heavy, true);
    let lgot = coll::all_to_all(comm, lmsgs)?.concat();
    let (rmsgs, rstay) = route_rows(s.r, s.rk, p, &heavy, false);
    let rgot = coll::all_to_all(comm, rmsgs)?.concat();
    let l = concat(vec![s.decode_left(&lgot)?, s.l.take_rows(&lstay)])?;
    let r = concat(vec![s.decode_right(&rgot)?, s.r.take_rows(&rstay)])?;
    drop((lgot, rgot));
    let (lk, rk) = (Keys::of(&l, &s.shape.lkeys), Keys::of(&r, &s.shape.rkeys));
    let kind = s.shape.kind;
    let (pairs, _, _) = hash_join(&lk, &rk, kind.keeps_left(), kind.keeps_right());
    let mut pairs = pairs;
    if !heavy.is_empty() {
        let bcast = |k: Option<&[u8]>, left: bool| {
            k.and_then(|k| heavy.get(k)).is_some_and(|&bl| bl == left)
        };
        pairs.retain(|a, b| match (a, b) {
            (Some(i), None) => !bcast(lk.get(i), true),
            (None, Some(j)) => !bcast(rk.get(j), false),
            _ => true,
        });
    }
    concat(vec![assemble(s.shape, &l, &r, &pairs), s.null_key_rows()])
}

/// Broadcast: the keyed rows of one side to every rank; each rank joins them with its rows of
/// the other side. A kept broadcast side's match flags are OR-reduced onto the rows' holders
/// (each rank sends every holder one bit per row of it), which emit the unmatched ones.
fn broadcast<C: Communicator>(comm: &C, s: &Sides, left: bool) -> Result<Table, JoinError> {
    let (me, p) = (comm.rank(), comm.size());
    let (xt, xk) = if left { (s.l, s.lk) } else { (s.r, s.rk) };
    let all: Vec<usize> = (0..xt.names().len()).collect();
    let keyed: Vec<usize> = (0..xt.rows()).filter(|&i| xk.get(i).is_some()).collect();
    let mut mine = Vec::new();
    for &i in &keyed {
        xt.encode_row(i, &all, &mut mine);
    }
    // Rows per holder, to place each holder's flags.
    let mut counts = vec![0u64; p];
    counts[me] = keyed.len() as u64;
    let parts = coll::all_gather(comm, &mine)?;
    drop(mine);
    let xs: Vec<Table> = parts
        .iter()
        .map(|b| {
            if left {
                s.decode_left(b)
            } else {
                s.decode_right(b)
            }
        })
        .collect::<Result<_, _>>()?;
    for (q, t) in xs.iter().enumerate() {
        counts[q] = t.rows() as u64;
    }
    let x = concat(xs)?;
    let kind = s.shape.kind;
    let (x_kept, y_kept) = if left {
        (kind.keeps_left(), kind.keeps_right())
    } else {
        (kind.keeps_right(), kind.keeps_left())
    };
    let (mut out, matched) = if left {
        let xk = Keys::of(&x, &s.shape.lkeys);
        let (mut pairs, lm, _) = hash_join(&xk, s.rk, false, y_kept);
        // Right rows with a NULL key are the null-key output's, not the join's (only a kept
        // right side has pairs without a left row).
        if y_kept {
            pairs.retain(|a, b| a.is_some() || b.is_some_and(|j| s.rk.get(j).is_some()));
        }
        (vec![assemble(s.shape, &x, s.r, &pairs)], lm)
    } else {
        let xk = Keys::of(&x, &s.shape.rkeys);
        let (mut pairs, _, rm) = hash_join(s.lk, &xk, y_kept, false);
        if y_kept {
            pairs.retain(|a, b| b.is_some() || a.is_some_and(|i| s.lk.get(i).is_some()));
        }
        (vec![assemble(s.shape, s.l, &x, &pairs)], rm)
    };
    if x_kept {
        // Each holder's flags as bits, to the holder.
        let mut msgs = vec![Vec::new(); p];
        let mut at = 0usize;
        for (q, &n) in counts.iter().enumerate() {
            let n = n as usize;
            let mut bits = vec![0u8; n.div_ceil(8)];
            for i in 0..n {
                if matched[at + i] {
                    bits[i / 8] |= 1 << (i % 8);
                }
            }
            msgs[q] = bits;
            at += n;
        }
        let got = coll::all_to_all(comm, msgs)?;
        let n = keyed.len();
        let unmatched: Vec<usize> = (0..n)
            .filter(|&i| {
                !got.iter()
                    .any(|b| b.get(i / 8).is_some_and(|&w| w & (1 << (i % 8)) != 0))
            })
            .map(|i| keyed[i])
            .collect();
        let pairs: Pairs = if left {
            unmatched.iter().map(|&i| (Some(i), None)).collect()
        } else {
            unmatched.iter().map(|&j| (None, Some(j))).collect()
        };
        out.push(assemble(s.shape, s.l, s.r, &pairs));
    }
    out.push(s.null_key_rows());
    concat(out)
}

/// The semi-joins' pairs without those of left rows whose key is NULL (those rows go with
/// the null-key output).
fn keyed_left(mut pairs: Pairs, lk: &Keys) -> Pairs {
    pairs.retain(|a, _| a.is_some_and(|i| lk.get(i).is_some()));
    pairs
}

/// This rank's distinct non-NULL left keys, in first-seen order.
fn distinct_left<'a>(s: &Sides<'a>) -> Vec<&'a [u8]> {
    let mut seen = KeyIndex::with_capacity(1024);
    for k in (0..s.l.rows()).filter_map(|i| s.lk.get(i)) {
        seen.insert(k);
    }
    seen.keys().to_vec()
}

/// `mine` to every rank holding keyed right rows (and to this one, handed over); the message
/// of every rank that sent one, in rank order.
fn to_right_holders<C: Communicator>(
    comm: &C,
    ins: &Inspection,
    mine: &[u8],
) -> Result<Vec<Vec<u8>>, JoinError> {
    let me = comm.rank();
    let msgs = ins
        .ranks
        .iter()
        .enumerate()
        .map(|(q, f)| {
            if q == me || f.right_keyed > 0 {
                mine.to_vec()
            } else {
                Vec::new()
            }
        })
        .collect();
    Ok(coll::all_to_all(comm, msgs)?)
}

/// Semi-join: every rank's distinct left keys to every rank holding keyed right rows; each
/// returns its right rows with those keys; each rank joins its left rows with what came
/// back. A right row whose key no rank's left holds is unmatched, which its holder knows
/// from the key lists.
fn semi<C: Communicator>(comm: &C, s: &Sides, ins: &Inspection) -> Result<Table, JoinError> {
    let p = comm.size();
    let mut list = Vec::new();
    for k in distinct_left(s) {
        list.extend_from_slice(&(k.len() as u32).to_le_bytes());
        list.extend_from_slice(k);
    }
    let lists = to_right_holders(comm, ins, &list)?;
    drop(list);
    let all: Vec<usize> = (0..s.r.names().len()).collect();
    let mut msgs = vec![Vec::new(); p];
    let mut wanted_anywhere = vec![false; s.r.rows()];
    // This rank's right keys numbered; each received key looked up there (a key no right row
    // has is dropped at once: filing every key of every list cost most of this strategy's
    // time), the wanting ranks grouped by key in rank order; the right rows scanned once.
    let mut rindex = KeyIndex::with_capacity(s.r.rows());
    let rid: Vec<u32> = (0..s.r.rows())
        .map(|j| s.rk.get(j).map_or(u32::MAX, |k| rindex.insert(k).0 as u32))
        .collect();
    let mut wants: Vec<(u32, u32)> = Vec::new();
    for (q, b) in lists.iter().enumerate() {
        let mut b = &b[..];
        while !b.is_empty() {
            let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
            if let Some(id) = rindex.get(&b[4..4 + n]) {
                wants.push((id as u32, q as u32));
            }
            b = &b[4 + n..];
        }
    }
    let (start, wanting) = group_by_id(rindex.len(), &wants);
    drop((wants, rindex));
    for (j, wanted) in wanted_anywhere.iter_mut().enumerate() {
        let id = rid[j];
        if id == u32::MAX {
            continue;
        }
        let ranks = &wanting[start[id as usize]..start[id as usize + 1]];
        for &q in ranks {
            s.r.encode_row(j, &all, &mut msgs[q as usize]);
        }
        *wanted = !ranks.is_empty();
    }
    drop((wanting, start, rid));
    let got = coll::all_to_all(comm, msgs)?.concat();
    let rr = s.decode_right(&got)?;
    let rrk = Keys::of(&rr, &s.shape.rkeys);
    let kind = s.shape.kind;
    // Left rows with a NULL key go with the null-key output.
    let (pairs, _, _) = hash_join(s.lk, &rrk, kind.keeps_left(), false);
    let pairs = keyed_left(pairs, s.lk);
    let mut out = vec![assemble(s.shape, s.l, &rr, &pairs)];
    if kind.keeps_right() {
        let pairs: Pairs = (0..s.r.rows())
            .filter(|&j| s.rk.get(j).is_some() && !wanted_anywhere[j])
            .map(|j| (None, Some(j)))
            .collect();
        out.push(assemble(s.shape, s.l, s.r, &pairs));
    }
    out.push(s.null_key_rows());
    concat(out)
}

/// The Bloom semi-join: each rank's filter of its distinct left keys to every rank holding
/// keyed right rows; each returns its right rows whose key passes; each rank joins its left
/// rows with what came back, the false positives matching nothing. A kept right side's
/// holders get one bit a row back (whether it matched there), since a filter cannot tell
/// them which of their rows no left row has.
fn bloom<C: Communicator>(comm: &C, s: &Sides, ins: &Inspection) -> Result<Table, JoinError> {
    let p = comm.size();
    let keys = distinct_left(s);
    let mut filter = Bloom::new(keys.len() as u64, p);
    for k in keys {
        filter.insert(k);
    }
    let filters = to_right_holders(comm, ins, filter.bytes())?;
    drop(filter);
    let all: Vec<usize> = (0..s.r.names().len()).collect();
    let mut msgs = vec![Vec::new(); p];
    // The right rows sent to each rank, in the order sent.
    let mut sent_rows: Vec<Vec<usize>> = vec![Vec::new(); p];
    let filters: Vec<(usize, Bloom)> = filters
        .into_iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(q, b)| (q, Bloom::from_bytes(b, p)))
        .collect();
    // Each right key hashed once, tested against every filter.
    for j in 0..s.r.rows() {
        let Some(h) = s.rk.get(j).map(key_hash) else {
            continue;
        };
        for (q, f) in &filters {
            if f.contains_hash(h) {
                s.r.encode_row(j, &all, &mut msgs[*q]);
                sent_rows[*q].push(j);
            }
        }
    }
    drop(filters);
    let got = coll::all_to_all(comm, msgs)?;
    let parts: Vec<Table> = got
        .iter()
        .map(|b| s.decode_right(b))
        .collect::<Result<_, _>>()?;
    drop(got);
    let counts: Vec<usize> = parts.iter().map(Table::rows).collect();
    let rr = concat(parts)?;
    let rrk = Keys::of(&rr, &s.shape.rkeys);
    let kind = s.shape.kind;
    let (pairs, _, rmatched) = hash_join(s.lk, &rrk, kind.keeps_left(), false);
    let pairs = keyed_left(pairs, s.lk);
    let mut out = vec![assemble(s.shape, s.l, &rr, &pairs)];
    if kind.keeps_right() {
        let matched = match_flags_back(comm, &rmatched, &counts, &sent_rows, s.r.rows())?;
        let pairs: Pairs = (0..s.r.rows())
            .filter(|&j| s.rk.get(j).is_some() && !matched[j])
            .map(|j| (None, Some(j)))
            .collect();
        out.push(assemble(s.shape, s.l, s.r, &pairs));
    }
    out.push(s.null_key_rows());
    concat(out)
}

/// The Bloom semi-join's flags back: `rmatched` says which received right rows matched here
/// (the rows of each rank back to back, `counts` of them); each holder gets one bit per row it
/// sent, and ORs them over ranks onto its `rows` rows (sent in the order `sent_rows`).
fn match_flags_back<C: Communicator>(
    comm: &C,
    rmatched: &[bool],
    counts: &[usize],
    sent_rows: &[Vec<usize>],
    rows: usize,
) -> Result<Vec<bool>, JoinError> {
    let mut msgs = Vec::with_capacity(counts.len());
    let mut at = 0;
    for &n in counts {
        let mut bits = vec![0u8; n.div_ceil(8)];
        for i in 0..n {
            if rmatched[at + i] {
                bits[i / 8] |= 1 << (i % 8);
            }
        }
        msgs.push(bits);
        at += n;
    }
    let got = coll::all_to_all(comm, msgs)?;
    let mut matched = vec![false; rows];
    for (bits, js) in got.iter().zip(sent_rows) {
        for (i, &j) in js.iter().enumerate() {
            if bits.get(i / 8).is_some_and(|&w| w & (1 << (i % 8)) != 0) {
                matched[j] = true;
            }
        }
    }
    Ok(matched)
}

/// The items of `(id, item)` pairs grouped by id (ids below `ids`), each group in the order
/// given, and where each id's group starts (`start[id]..start[id + 1]`): a counting sort, no
/// vector per id.
fn group_by_id<T: Copy + Default>(ids: usize, pairs: &[(u32, T)]) -> (Vec<usize>, Vec<T>) {
    let mut start = vec![0usize; ids + 1];
    for &(id, _) in pairs {
        start[id as usize + 1] += 1;
    }
    for x in 1..start.len() {
        start[x] += start[x - 1];
    }
    let mut fill = start.clone();
    let mut grouped = vec![T::default(); pairs.len()];
    for &(id, item) in pairs {
        grouped[fill[id as usize]] = item;
        fill[id as usize] += 1;
    }
    (start, grouped)
}

/// (key, row number) of each keyed row to its key's owner.
fn key_rows_to_owners(k: &Keys, p: usize) -> Vec<Vec<u8>> {
    let mut msgs = vec![Vec::new(); p];
    for i in 0..k.len() {
        if let Some(key) = k.get(i) {
            let m = &mut msgs[owner(key, p)];
            m.extend_from_slice(&(key.len() as u32).to_le_bytes());
            m.extend_from_slice(key);
            m.extend_from_slice(&(i as u64).to_le_bytes());
        }
    }
    msgs
}

/// The (source rank, key, row) entries of received key-row messages.
fn read_key_rows(got: &[Vec<u8>]) -> Vec<(usize, &[u8], u64)> {
    let mut out = Vec::new();
    for (q, b) in got.iter().enumerate() {
        let mut b = &b[..];
        while !b.is_empty() {
            let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
            let row = u64::from_le_bytes(b[4 + n..12 + n].try_into().expect("8"));
            out.push((q, &b[4..4 + n], row));
            b = &b[12 + n..];
        }
    }
    out
}

/// Join index: keys and row numbers to the owners, which pair them (the index); each right
/// row's holder gets its entries and sends the row's non-key columns to the left row's
/// holder, which assembles the output. Unmatched rows are known to their own holders.
fn index<C: Communicator>(comm: &C, s: &Sides) -> Result<Table, JoinError> {
    let p = comm.size();
    let lgot = coll::all_to_all(comm, key_rows_to_owners(s.lk, p))?;
    let rgot = coll::all_to_all(comm, key_rows_to_owners(s.rk, p))?;
    // The left entries grouped by key (numbered by a KeyIndex, then a counting sort); each
    // right entry pairs with its key's group. (A map of per-key vectors cost an allocation
    // and a rehash per key: most of this strategy's time on 10⁶ rows.)
    let lrows = read_key_rows(&lgot);
    let mut ids = KeyIndex::with_capacity(lrows.len());
    let entries: Vec<(u32, (usize, u64))> = lrows
        .iter()
        .map(|&(q, k, i)| (ids.insert(k).0 as u32, (q, i)))
        .collect();
    let (start, grouped) = group_by_id(ids.len(), &entries);
    drop(entries);
    // The index entries, to the right rows' holders: (right row, left rank, left row).
    let mut msgs = vec![Vec::new(); p];
    for (q2, k, j) in read_key_rows(&rgot) {
        let Some(id) = ids.get(k) else { continue };
        let m = &mut msgs[q2];
        for &(q1, i) in &grouped[start[id]..start[id + 1]] {
            m.extend_from_slice(&j.to_le_bytes());
            m.extend_from_slice(&(q1 as u32).to_le_bytes());
            m.extend_from_slice(&i.to_le_bytes());
        }
    }
    drop((ids, grouped, lrows));
    drop((lgot, rgot));
    let entries = coll::all_to_all(comm, msgs)?.concat();
    let mut rmatched = vec![false; s.r.rows()];
    let mut msgs = vec![Vec::new(); p];
    for e in entries.chunks_exact(20) {
        let j = u64::from_le_bytes(e[..8].try_into().expect("8")) as usize;
        let q1 = u32::from_le_bytes(e[8..12].try_into().expect("4")) as usize;
        rmatched[j] = true;
        let m = &mut msgs[q1];
        m.extend_from_slice(&e[12..20]);
        s.r.encode_row(j, &s.shape.rrest, m);
    }
    drop(entries);
    let got = coll::all_to_all(comm, msgs)?.concat();
    // Left row numbers and the right rows' other columns, pair by pair.
    let rest_types: Vec<_> = s
        .shape
        .rrest
        .iter()
        .map(|&c| s.shape.rschema.1[c])
        .collect();
    let mut rest: Vec<Column> = rest_types.iter().map(|&t| Column::empty(t)).collect();
    let mut lrows: Vec<Option<usize>> = Vec::new();
    let mut b = &got[..];
    while !b.is_empty() {
        lrows.push(Some(
            u64::from_le_bytes(b[..8].try_into().expect("8")) as usize
        ));
        b = &b[8..];
        for c in &mut rest {
            c.decode_push(&mut b).map_err(JoinError::Invalid)?;
        }
    }
    let mut cols: Vec<Column> = Vec::with_capacity(s.shape.names.len());
    cols.extend(s.shape.lkeys.iter().map(|&c| s.l.columns()[c].take(&lrows)));
    cols.extend(s.shape.lrest.iter().map(|&c| s.l.columns()[c].take(&lrows)));
    cols.extend(rest);
    let mut out = vec![Table::new(s.shape.names.clone(), cols).map_err(JoinError::Invalid)?];
    let kind = s.shape.kind;
    let mut pairs = Pairs::new();
    if kind.keeps_left() {
        let mut lmatched = vec![false; s.l.rows()];
        for &i in lrows.iter().flatten() {
            lmatched[i] = true;
        }
        pairs.extend(
            (0..s.l.rows())
                .filter(|&i| s.lk.get(i).is_some() && !lmatched[i])
                .map(|i| (Some(i), None)),
        );
    }
    if kind.keeps_right() {
        pairs.extend(
            (0..s.r.rows())
                .filter(|&j| s.rk.get(j).is_some() && !rmatched[j])
                .map(|j| (None, Some(j))),
        );
    }
    out.push(assemble(s.shape, s.l, s.r, &pairs));
    out.push(s.null_key_rows());
    concat(out)
}

/// The inspector's figures alone (collective, in `mode`): every strategy's prediction, no
/// row moved.
pub fn explain<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &Table,
    r: &Table,
    machine: &deinsum_plan::Machine,
    mode: InspectMode,
) -> Result<Inspection, JoinError> {
    let (lk, rk) = (Keys::of(l, &shape.lkeys), Keys::of(r, &shape.rkeys));
    inspect(comm, shape, l, &lk, r, &rk, machine, mode)
}
