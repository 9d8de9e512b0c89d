//! The sketch inspector: each rank sketches its keys (a HyperLogLog and a Misra–Gries summary
//! per side, [`crate::sketch`]) and every rank merges every rank's sketches (one all-gather of
//! a few kilobytes a rank, whatever the rows); the merged heavy-hitter candidates are then
//! counted exactly on every rank and gathered with the figures that are cheap to get exactly
//! (rows and bytes per rank, and each rank's bytes, rows and key-message bytes to each key
//! owner as a P-vector). Every rank then predicts every strategy alone, from the same bytes:
//!
//! - exact: the candidates' moves (as the exact inspector adds them), the shuffle's and the
//!   broadcast's bytes per rank, every strategy's key-routed rows in, the heavy keys;
//! - estimated: the other keys' matches (distinct matched keys by inclusion–exclusion of the
//!   HyperLogLogs, and a containment estimate of their rows: a matched key has the mean rows
//!   of its side's other keys), hence output rows and bytes, and the semi-joins' and join
//!   index's bytes that follow matches.
//!
//! Results never depend on the estimates: the strategies route rows by key alone, and the
//! heavy keys the shuffle splits are decided from exact counts.

use super::{
    add_key, finish, heavy_threshold, key_msg_bytes, null_key_bytes, Layout, Ranks, Summary,
    BCAST_L, BCAST_R, BLOOM, INDEX, INDEX_ENTRY, RECV, ROWS_IN, ROWS_OUT, ROW_NUMBER, SEMI, SENT,
    SHUFFLE, SLOTS,
};
use crate::bloom::{BITS_PER_KEY, HASHES};
use crate::coll;
use crate::cost::Strategy;
use crate::kernel::{key_hash, owner, JoinShape, Keys};
use crate::sketch::{hll_std_error, HashKeyed, Hll, MisraGries, HLL_BITS};
use crate::table::RowSizes;
use crate::{Inspection, JoinError, Table};
use deinsum_exec::{CommError, Communicator};
use serde::Serialize;

/// Rows of both tables over all ranks from which [`super::InspectMode::Auto`] sketches: the
/// exact pass sends about 60 bytes a distinct key and builds a map of them at their owners,
/// a large part of a join of this many rows (measured: 10⁷ ⋈ 10⁶ at P = 2).
pub const SKETCH_ROWS: u64 = 2_000_000;

/// Misra–Gries counters per side on `p` ranks: at least 16·P, so that every key heavy in a
/// shuffle (over (N_L + N_R)/(16·P) rows) has over N/(k+1) rows on one side and is found.
pub fn counters(p: usize) -> usize {
    (32 * p).max(256)
}

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
    /// The most the left summary undercounts a key (at most N_L/(counters+1)).
    pub left_count_error: u64,
    /// The same on the right.
    pub right_count_error: u64,
    /// Figures that are estimates: output rows and bytes, every strategy's rows out, and the
    /// bytes of the strategies whose `bytes_exact` is false.
    pub estimated: Vec<String>,
}

/// One side's pass over this rank's rows.
struct Pass<'a> {
    hll: Hll,
    mg: MisraGries<'a>,
    keyed: u64,
    bytes: u64,
    rest: u64,
    keymsg: u64,
}

/// Sketches one side's keyed rows and adds, per key owner, their bytes, rows and
/// key-message bytes (the join index's (key, row) entries) to `to`.
fn pass<'a>(
    k: &'a Keys,
    all: &RowSizes,
    rest: &RowSizes,
    p: usize,
    to: &mut [[u64; 3]],
) -> Pass<'a> {
    let mut s = Pass {
        hll: Hll::new(),
        mg: MisraGries::new(counters(p)),
        keyed: 0,
        bytes: 0,
        rest: 0,
        keymsg: 0,
    };
    for i in 0..k.len() {
        let Some(key) = k.get(i) else { continue };
        let h = key_hash(key);
        s.hll.add_hash(h);
        s.mg.add(h, key, 1);
        let (b, km) = (all.get(i), key_msg_bytes(key));
        let e = &mut to[(h % p as u64) as usize];
        e[0] += b;
        e[1] += 1;
        e[2] += km + ROW_NUMBER;
        s.keyed += 1;
        s.bytes += b;
        s.rest += rest.get(i);
        s.keymsg += km;
    }
    s
}

/// Reads `n` bytes off the front of `b`.
fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], JoinError> {
    if b.len() < n {
        return Err(CommError::Invalid("a truncated sketch".into()).into());
    }
    let (a, rest) = b.split_at(n);
    *b = rest;
    Ok(a)
}

/// Figures per rank in the second gather, before the owner vectors and the candidates.
const FIGS: usize = 10;

/// The sketch inspector (collective).
pub(super) fn inspect<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    (l, lk): (&Table, &Keys),
    (r, rk): (&Table, &Keys),
    machine: &deinsum_plan::Machine,
) -> Result<Inspection, JoinError> {
    let p = comm.size();
    let (lall, rall) = (l.row_sizes(&shape.lall()), r.row_sizes(&shape.rall()));
    let (lrest, rrest) = (l.row_sizes(&shape.lrest), r.row_sizes(&shape.rrest));
    let mut to = vec![[0u64; 3]; p];
    let lp = pass(lk, &lall, &lrest, p, &mut to);
    let rp = pass(rk, &rall, &rrest, p, &mut to);
    // Round 1: the sketches.
    let mut msg = Vec::with_capacity(2 << HLL_BITS);
    msg.extend_from_slice(lp.hll.bytes());
    msg.extend_from_slice(rp.hll.bytes());
    lp.mg.encode(&mut msg);
    rp.mg.encode(&mut msg);
    let got = coll::all_gather(comm, &msg)?;
    drop(msg);
    let k = counters(p);
    let (mut hl, mut hr) = (Hll::new(), Hll::new());
    let (mut ml, mut mr) = (MisraGries::new(k), MisraGries::new(k));
    let mut distinct = Vec::with_capacity(p);
    for part in &got {
        let mut b = &part[..];
        let rank_l = Hll::from_bytes(take(&mut b, 1 << HLL_BITS)?).map_err(CommError::Invalid)?;
        let rank_r = Hll::from_bytes(take(&mut b, 1 << HLL_BITS)?).map_err(CommError::Invalid)?;
        distinct.push(rank_l.estimate().round() as u64);
        hl.merge(&rank_l);
        hr.merge(&rank_r);
        ml.merge(&MisraGries::decode(k, &mut b).map_err(CommError::Invalid)?);
        mr.merge(&MisraGries::decode(k, &mut b).map_err(CommError::Invalid)?);
    }
    // The candidates, in the same order on every rank: the left's counters, then the right's
    // not among them.
    let mut cands: Vec<&[u8]> = Vec::new();
    let mut index: HashKeyed<usize> = HashKeyed::default();
    for (key, _) in ml.top().into_iter().chain(mr.top()) {
        let h = key_hash(key);
        if let std::collections::hash_map::Entry::Vacant(e) = index.entry(h) {
            e.insert(cands.len());
            cands.push(key);
        }
    }
    // The candidates' exact summaries on this rank.
    let mut sums: Vec<Summary> = vec![[0; 6]; cands.len()];
    if !cands.is_empty() {
        for (k, all, rest, off) in [(lk, &lall, &lrest, 0), (rk, &rall, &rrest, 3)] {
            for i in 0..k.len() {
                let Some(key) = k.get(i) else { continue };
                if let Some(&c) = index.get(&key_hash(key)) {
                    if cands[c] == key {
                        let e = &mut sums[c];
                        e[off] += 1;
                        e[off + 1] += all.get(i);
                        e[off + 2] += rest.get(i);
                    }
                }
            }
        }
    }
    // The owner vectors without the candidates (added key by key below).
    for (c, e) in cands.iter().zip(&sums) {
        let t = &mut to[owner(c, p)];
        t[0] -= e[1] + e[4];
        t[1] -= e[0] + e[3];
        t[2] -= (e[0] + e[3]) * (key_msg_bytes(c) + ROW_NUMBER);
    }
    // Round 2: the exact figures.
    let null_bytes = null_key_bytes(shape, (l, lk, &lall), (r, rk, &rall));
    let mut mine: Vec<u64> = vec![
        l.rows() as u64,
        r.rows() as u64,
        lp.keyed,
        rp.keyed,
        lp.bytes,
        rp.bytes,
        lp.rest,
        rp.rest,
        lp.keymsg,
        null_bytes,
    ];
    mine.extend(to.iter().flatten());
    mine.extend(sums.iter().flatten());
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = coll::all_gather(comm, &bytes)?;
    let figs: Vec<Vec<u64>> = all
        .iter()
        .map(|b| {
            if b.len() != bytes.len() {
                return Err(CommError::Invalid(
                    "sketch figures of different lengths".into(),
                ));
            }
            Ok(b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
                .collect())
        })
        .collect::<Result<_, _>>()?;
    drop((all, bytes, mine));
    let fig = |s: usize, f: usize| figs[s][f];
    let to_of = |s: usize, o: usize, f: usize| figs[s][FIGS + 3 * o + f];
    let sum_of = |s: usize, c: usize| -> Summary {
        let at = FIGS + 3 * p + 6 * c;
        figs[s][at..at + 6].try_into().expect("6")
    };
    let lay = Layout { p };
    let mut v = vec![0u64; lay.len()];
    let keyed_total: u64 = (0..p).map(|s| fig(s, 2) + fig(s, 3)).sum();
    let ranks = Ranks {
        heavy: heavy_threshold(keyed_total, p),
        right_holder: (0..p).map(|s| fig(s, 3) > 0).collect(),
        stripes: None,
    };
    // The candidates, exactly.
    let mut heavy = Vec::new();
    let mut cand_rows = vec![[0u64; 6]; p];
    let (mut cl, mut cr, mut cm) = (0u64, 0u64, 0u64);
    // Distinct candidates holding left rows on each rank.
    let mut cand_here = vec![0u64; p];
    let mut by_rank = Vec::with_capacity(p);
    for (c, &key) in cands.iter().enumerate() {
        by_rank.clear();
        for s in 0..p {
            let e = sum_of(s, c);
            if e.iter().any(|&x| x > 0) {
                by_rank.push((s, e));
                for (a, x) in cand_rows[s].iter_mut().zip(e) {
                    *a += x;
                }
                cand_here[s] += (e[0] > 0) as u64;
            }
        }
        let (lc, rc): (u64, u64) = by_rank
            .iter()
            .fold((0, 0), |(a, b), (_, e)| (a + e[0], b + e[3]));
        cl += (lc > 0) as u64;
        cr += (rc > 0) as u64;
        cm += (lc > 0 && rc > 0) as u64;
        if by_rank.is_empty() {
            continue;
        }
        if let Some(bl) = add_key(&mut v, &lay, shape, key, owner(key, p), &by_rank, &ranks) {
            heavy.push((key.to_vec(), bl));
        }
    }
    // Every rank's whole figures, as the exact inspector's.
    let (kl, kr) = (shape.kind.keeps_left(), shape.kind.keeps_right());
    for s in 0..p {
        for f in 0..6 {
            v[lay.rank(s, f)] = fig(s, f);
        }
        let kept =
            if kl { fig(s, 0) - fig(s, 2) } else { 0 } + if kr { fig(s, 1) - fig(s, 3) } else { 0 };
        for slot in 0..SLOTS {
            v[lay.slot(slot, ROWS_OUT, s)] += kept;
            v[lay.slot(slot, ROWS_IN, s)] += kept;
        }
        v[lay.global(1)] += fig(s, 9);
    }
    let (dl, dr) = (hl.estimate(), hr.estimate());
    let mut hu = hl.clone();
    hu.merge(&hr);
    let du = hu.estimate();
    let dm = (dl + dr - du).clamp(0.0, dl.min(dr));
    let rest = Rest {
        p,
        kl,
        kr,
        lk: (0..p)
            .map(|s| (fig(s, 2) - cand_rows[s][0]) as f64)
            .collect(),
        rk: (0..p)
            .map(|s| (fig(s, 3) - cand_rows[s][3]) as f64)
            .collect(),
        lb: (0..p)
            .map(|s| (fig(s, 4) - cand_rows[s][1]) as f64)
            .collect(),
        rb: (0..p)
            .map(|s| (fig(s, 5) - cand_rows[s][4]) as f64)
            .collect(),
        rrest: (0..p).map(|s| fig(s, 7) - cand_rows[s][5]).sum::<u64>() as f64,
        dl: (dl - cl as f64).max(0.0),
        dr: (dr - cr as f64).max(0.0),
        dm: (dm - cm as f64).max(0.0),
        key_bytes: {
            let (n, b) = (0..p).fold((0, 0), |(n, b), s| (n + fig(s, 2), b + fig(s, 8)));
            if n > 0 {
                b as f64 / n as f64
            } else {
                0.0
            }
        },
        distinct_here: (0..p)
            .map(|s| distinct[s].saturating_sub(cand_here[s]) as f64)
            .collect(),
        right_holder: ranks.right_holder.clone(),
    };
    rest.add(&mut v, &lay, shape, &|s, o, f| to_of(s, o, f));
    let mut ins = finish(&v, &lay, shape, machine, heavy, &distinct)?;
    for pr in &mut ins.predictions {
        pr.bytes_exact = matches!(pr.strategy, Strategy::Shuffle | Strategy::Broadcast);
        pr.rows_exact = false;
    }
    let mut estimated = vec!["output_rows".to_string(), "output_bytes".into()];
    estimated.extend(["rows_out", "left_distinct"].map(String::from));
    for pr in ins.predictions.iter().filter(|p| !p.bytes_exact) {
        estimated.push(format!("{}.sent", pr.strategy.name()));
        estimated.push(format!("{}.received", pr.strategy.name()));
    }
    ins.sketch = Some(SketchFigures {
        left_distinct: dl.round() as u64,
        right_distinct: dr.round() as u64,
        union_distinct: du.round() as u64,
        matched_distinct: dm.round() as u64,
        distinct_rel_error: hll_std_error(),
        counters: k,
        candidates: cands.len(),
        left_count_error: ml.error(),
        right_count_error: mr.error(),
        estimated,
    });
    Ok(ins)
}

/// The keys other than the candidates ("the rest"), per rank and in all: their keyed rows
/// and bytes per rank, estimated distinct counts, and the model of their matches.
struct Rest {
    p: usize,
    kl: bool,
    kr: bool,
    /// Keyed rows and their whole-row bytes per rank.
    lk: Vec<f64>,
    rk: Vec<f64>,
    lb: Vec<f64>,
    rb: Vec<f64>,
    /// Non-key bytes of the right rows, in all.
    rrest: f64,
    /// Distinct keys left, right, and on both sides.
    dl: f64,
    dr: f64,
    dm: f64,
    /// Mean bytes of a left key in a key list.
    key_bytes: f64,
    /// Distinct left keys per rank.
    distinct_here: Vec<f64>,
    right_holder: Vec<bool>,
}

/// Adds `x` (an estimate) to `v[i]`.
fn add(v: &mut [u64], i: usize, x: f64) {
    v[i] += x.max(0.0).round() as u64;
}

/// The Bloom filters' false-positive rate at [`BITS_PER_KEY`] bits and [`HASHES`] bits a key.
fn false_positives() -> f64 {
    (1.0 - (-(HASHES as f64) / BITS_PER_KEY as f64).exp()).powi(HASHES as i32)
}

impl Rest {
    /// Adds the rest's moves to `v`: exact where they follow from the owner vectors `to(s,
    /// o, f)` (f: bytes, rows, key-message bytes rank s sends owner o), estimated where they
    /// follow from matches.
    fn add(
        &self,
        v: &mut [u64],
        lay: &Layout,
        shape: &JoinShape,
        to: &dyn Fn(usize, usize, usize) -> u64,
    ) {
        let p = self.p;
        let (nl, nr) = (self.lk.iter().sum::<f64>(), self.rk.iter().sum::<f64>());
        // Containment: a matched key has its side's mean rows a key.
        let dl = if nl > 0.0 {
            self.dl.clamp(1.0, nl)
        } else {
            0.0
        };
        let dr = if nr > 0.0 {
            self.dr.clamp(1.0, nr)
        } else {
            0.0
        };
        let dm = self.dm.min(dl).min(dr);
        let al = if dl > 0.0 { nl / dl } else { 0.0 };
        let ar = if dr > 0.0 { nr / dr } else { 0.0 };
        let pairs = dm * al * ar;
        let (ml, mr) = (dm * al, dm * ar);
        let ul = if self.kl { nl - ml } else { 0.0 };
        let ur = if self.kr { nr - mr } else { 0.0 };
        let mean = |b: f64, n: f64| if n > 0.0 { b / n } else { 0.0 };
        let lbytes = mean(self.lb.iter().sum(), nl);
        let rbytes = mean(self.rb.iter().sum(), nr);
        let rrest = mean(self.rrest, nr);
        let out_bytes = pairs * (lbytes + rrest)
            + ul * (lbytes + shape.rrest.len() as f64)
            + ur * (rbytes + shape.lrest.len() as f64);
        add(v, lay.global(0), pairs);
        add(v, lay.global(1), out_bytes);
        let share = |x: &[f64], s: usize| {
            let t: f64 = x.iter().sum();
            if t > 0.0 {
                x[s] / t
            } else {
                0.0
            }
        };
        // Rows to each owner (exact), and each owner's share of them.
        let owned: Vec<f64> = (0..p)
            .map(|o| (0..p).map(|s| to(s, o, 1)).sum::<u64>() as f64)
            .collect();
        for o in 0..p {
            for s in (0..p).filter(|&s| s != o) {
                for (slot, f) in [(SHUFFLE, 0), (INDEX, 2)] {
                    v[lay.slot(slot, SENT, s)] += to(s, o, f);
                    v[lay.slot(slot, RECV, o)] += to(s, o, f);
                }
            }
            v[lay.slot(SHUFFLE, ROWS_IN, o)] += owned[o] as u64;
            v[lay.slot(INDEX, ROWS_IN, o)] += owned[o] as u64;
        }
        // Rows out: where each strategy makes the pairs and keeps the unmatched rows.
        let lo = pairs + ul;
        for s in 0..p {
            let (ls, rs, os) = (share(&self.lk, s), share(&self.rk, s), share(&owned, s));
            add(v, lay.slot(SHUFFLE, ROWS_OUT, s), (lo + ur) * os);
            add(
                v,
                lay.slot(BCAST_L, ROWS_OUT, s),
                (pairs + ur) * rs + ul * ls,
            );
            add(v, lay.slot(BCAST_R, ROWS_OUT, s), lo * ls + ur * rs);
            for slot in [SEMI, INDEX, BLOOM] {
                add(v, lay.slot(slot, ROWS_OUT, s), lo * ls + ur * rs);
            }
        }
        // The chance a rank holds some left row of a matched key.
        let held: Vec<f64> = (0..p)
            .map(|q| 1.0 - (1.0 - share(&self.lk, q)).powf(al))
            .collect();
        let fp = false_positives();
        let ae = INDEX_ENTRY as f64;
        for s in 0..p {
            let (ls, rs, os) = (share(&self.lk, s), share(&self.rk, s), share(&owned, s));
            // Right rows of matched keys here, and their mean bytes.
            let matched = mr * rs;
            let rbs = mean(self.rb[s], self.rk[s]);
            // Semi-join: key lists to the other right holders, matched right rows back.
            if self.distinct_here[s] > 0.0 {
                for q in (0..p).filter(|&q| q != s && self.right_holder[q]) {
                    add(
                        v,
                        lay.slot(SEMI, SENT, s),
                        self.distinct_here[s] * self.key_bytes,
                    );
                    add(
                        v,
                        lay.slot(SEMI, RECV, q),
                        self.distinct_here[s] * self.key_bytes,
                    );
                }
            }
            if self.lk[s] > 0.0 {
                add(v, lay.slot(SEMI, ROWS_IN, s), self.lk[s] + mr * held[s]);
                add(v, lay.slot(BLOOM, ROWS_IN, s), self.lk[s]);
            }
            for (q, &h) in held.iter().enumerate() {
                let back = matched * h;
                // Bloom: the matched rows and the false positives of the others.
                let passed = if self.distinct_here[q] > 0.0 {
                    back + fp * (self.rk[s] - back)
                } else {
                    0.0
                };
                add(v, lay.slot(BLOOM, ROWS_IN, q), passed);
                if q != s {
                    add(v, lay.slot(SEMI, SENT, s), back * rbs);
                    add(v, lay.slot(SEMI, RECV, q), back * rbs);
                    add(v, lay.slot(BLOOM, SENT, s), passed * rbs);
                    add(v, lay.slot(BLOOM, RECV, q), passed * rbs);
                    add(v, lay.pair(s, q), passed);
                }
            }
            // Join index: entries from the owners to the right rows' holders, then the right
            // rows' other columns (with the left row number) to the left rows' holders.
            add(v, lay.slot(INDEX, SENT, s), ae * pairs * os * (1.0 - rs));
            add(v, lay.slot(INDEX, RECV, s), ae * pairs * rs * (1.0 - os));
            let m = ROW_NUMBER as f64 + rrest;
            add(v, lay.slot(INDEX, SENT, s), pairs * rs * (1.0 - ls) * m);
            add(v, lay.slot(INDEX, RECV, s), pairs * ls * (1.0 - rs) * m);
        }
    }
}
