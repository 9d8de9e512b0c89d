//! The inspector's entry point ([`inspect`]: exact, sketch, or auto's choice of them) and the
//! sketch inspector.
//!
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

use crate::bloom::{BITS_PER_KEY, HASHES};
use crate::coll;
use crate::cost::Strategy;
use crate::inspect::{
    add_key, finish, heavy_threshold, inspect_exact, key_msg_bytes, null_key_bytes, InspectMode,
    Layout, Ranks, SketchFigures, Summary, BCAST_L, BCAST_R, BLOOM, INDEX, INDEX_ENTRY, RECV,
    ROWS_IN, ROWS_OUT, ROW_NUMBER, SEMI, SENT, SHUFFLE, SLOTS,
};
use crate::kernel::{key_hash, owner, JoinShape, Keys};
use crate::sketch::{hll_std_error, HashKeyed, Hll, MisraGries, HLL_BITS};
use crate::table::RowSizes;
use crate::{Inspection, JoinError, Table};
use deinsum_exec::{CommError, Communicator};

/// Rows of both tables over all ranks from which [`InspectMode::Auto`] sketches: the
/// exact pass sends about 60 bytes a distinct key and builds a map of them at their owners.
/// Measured (`--strategy shuffle --repeat 7`, least run, load ~12): 2·10⁴ rows, exact 4.1 ms
/// and sketch 2.1 ms at P = 2, 5.9 and 6.9 ms at P = 8; 2·10⁵ rows, exact 116 and 76 ms,
/// sketch 47 and 18 ms; 1.1·10⁶ rows, exact 615 and 651 ms, sketch 132 and 145 ms (the
/// sketch's predictions within 3% of the exact ones there).
pub const SKETCH_ROWS: u64 = 50_000;

/// Misra–Gries counters per side on `p` ranks: at least 16·P, so that every key heavy in a
/// shuffle (over (N_L + N_R)/(16·P) rows) has over N/(k+1) rows on one side and is found.
pub fn counters(p: usize) -> usize {
    (32 * p).max(256)
}

/// Rows a rank's Misra–Gries summary of one side counts at least, on `p` ranks: a key at the
/// heavy threshold (1/(16·P) of the rows) then has over 512 expected rows among them, twice
/// the summary's bound, so sampling misses it with a probability under 10⁻¹⁰ (Chernoff).
pub fn summary_rows(p: usize) -> usize {
    (1 << 16).max(p << 13)
}

/// The summary counts every `stride`-th row of a side of `rows` rows, `stride` times: the
/// summary only names candidates (counted exactly afterwards), and on large tables its map
/// updates were a quarter of the inspector's time.
pub fn summary_stride(rows: usize, p: usize) -> usize {
    (rows / summary_rows(p)).max(1)
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
    let stride = summary_stride(k.len(), p);
    // Rows until the next sampled one (a countdown: no division a row).
    let mut skip = 0usize;
    for i in 0..k.len() {
        let sampled = skip == 0;
        skip = if sampled { stride - 1 } else { skip - 1 };
        let Some(key) = k.get(i) else { continue };
        let h = key_hash(key);
        s.hll.add_hash(h);
        if sampled {
            s.mg.add(h, key, stride as u64);
        }
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
    // A counter of at most two samples' weight is no heavy key's (one expects over 512
    // samples): dropped, so that a table without heavy keys names no candidates to count.
    if stride > 1 {
        s.mg.drop_under(3 * stride as u64);
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

/// Runs the inspector (collective) in `mode` and predicts every strategy on `machine`.
#[allow(clippy::too_many_arguments)]
pub fn inspect<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &Table,
    lk: &Keys,
    r: &Table,
    rk: &Keys,
    machine: &deinsum_plan::Machine,
    mode: InspectMode,
) -> Result<Inspection, JoinError> {
    let sketch = match mode {
        InspectMode::Exact => false,
        InspectMode::Sketch => true,
        // Sketch when the tables are big enough that the exact summaries' all-to-all costs.
        InspectMode::Auto => {
            let mut n = [(l.rows() + r.rows()) as u64];
            coll::all_sum(comm, &mut n)?;
            n[0] >= SKETCH_ROWS
        }
    };
    if sketch {
        inspect_sketch(comm, shape, (l, lk), (r, rk), machine)
    } else {
        inspect_exact(comm, shape, l, lk, r, rk, machine)
    }
}

/// Figures per rank in the second gather, before the owner vectors and the candidates.
const FIGS: usize = 10;

/// Every rank's merged sketches: HyperLogLogs and Misra–Gries summaries of both sides (the
/// summaries' keys borrowed from the gathered bytes), and each rank's distinct left keys.
struct Merged<'a> {
    hl: Hll,
    hr: Hll,
    ml: MisraGries<'a>,
    mr: MisraGries<'a>,
    distinct: Vec<u64>,
}

/// Merges the sketches every rank sent (`got`, in rank order: the same result on every rank).
fn merge(got: &[Vec<u8>], k: usize) -> Result<Merged<'_>, JoinError> {
    let mut m = Merged {
        hl: Hll::new(),
        hr: Hll::new(),
        ml: MisraGries::new(k),
        mr: MisraGries::new(k),
        distinct: Vec::with_capacity(got.len()),
    };
    for part in got {
        let mut b = &part[..];
        let rank_l = Hll::from_bytes(take(&mut b, 1 << HLL_BITS)?).map_err(CommError::Invalid)?;
        let rank_r = Hll::from_bytes(take(&mut b, 1 << HLL_BITS)?).map_err(CommError::Invalid)?;
        m.distinct.push(rank_l.estimate().round() as u64);
        m.hl.merge(&rank_l);
        m.hr.merge(&rank_r);
        m.ml.merge(&MisraGries::decode(k, &mut b).map_err(CommError::Invalid)?);
        m.mr.merge(&MisraGries::decode(k, &mut b).map_err(CommError::Invalid)?);
    }
    Ok(m)
}

/// The candidates, in the same order on every rank (the left's counters, then the right's not
/// among them), and their index by hash.
fn candidates<'a>(m: &Merged<'a>) -> (Vec<&'a [u8]>, HashKeyed<usize>) {
    let mut cands: Vec<&[u8]> = Vec::new();
    let mut index: HashKeyed<usize> = HashKeyed::default();
    for (key, _) in m.ml.top().into_iter().chain(m.mr.top()) {
        if let std::collections::hash_map::Entry::Vacant(e) = index.entry(key_hash(key)) {
            e.insert(cands.len());
            cands.push(key);
        }
    }
    (cands, index)
}

/// Whether two keys are equal; an 8-byte key (an int64's) as one word, without a call to
/// `memcmp` (a Zipf table's rows are mostly candidates').
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    match (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(b)) {
        (Ok(x), Ok(y)) => u64::from_ne_bytes(x) == u64::from_ne_bytes(y),
        _ => a == b,
    }
}

/// The candidates' exact summaries on this rank.
fn count(
    cands: &[&[u8]],
    index: &HashKeyed<usize>,
    sides: [(&Keys, &RowSizes, &RowSizes); 2],
) -> Vec<Summary> {
    let mut sums: Vec<Summary> = vec![[0; 6]; cands.len()];
    if cands.is_empty() {
        return sums;
    }
    for ((k, all, rest), off) in sides.into_iter().zip([0, 3]) {
        for i in 0..k.len() {
            let Some(key) = k.get(i) else { continue };
            if let Some(&c) = index.get(&key_hash(key)) {
                if same_key(cands[c], key) {
                    let e = &mut sums[c];
                    e[off] += 1;
                    e[off + 1] += all.get(i);
                    e[off + 2] += rest.get(i);
                }
            }
        }
    }
    sums
}

/// Every rank's `mine` (of one length everywhere), in rank order (collective).
fn gather_words<C: Communicator>(comm: &C, mine: &[u64]) -> Result<Vec<Vec<u64>>, JoinError> {
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = coll::all_gather(comm, &bytes)?;
    all.iter()
        .map(|b| {
            if b.len() != bytes.len() {
                return Err(
                    CommError::Invalid("sketch figures of different lengths".into()).into(),
                );
            }
            Ok(b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
                .collect())
        })
        .collect()
}

/// The sketch inspector (collective).
fn inspect_sketch<C: Communicator>(
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
    let merged = merge(&got, counters(p))?;
    let (cands, index) = candidates(&merged);
    let sums = count(&cands, &index, [(lk, &lall, &lrest), (rk, &rall, &rrest)]);
    // The owner vectors without the candidates (added key by key).
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
    let figs = gather_words(comm, &mine)?;
    drop(mine);
    predict(shape, machine, &figs, &cands, &merged)
}

/// Every strategy's prediction from every rank's figures `figs` (the same on every rank).
fn predict(
    shape: &JoinShape,
    machine: &deinsum_plan::Machine,
    figs: &[Vec<u64>],
    cands: &[&[u8]],
    merged: &Merged,
) -> Result<Inspection, JoinError> {
    let p = figs.len();
    let fig = |s: usize, f: usize| figs[s][f];
    let lay = Layout { p };
    let mut v = vec![0u64; lay.len()];
    let keyed_total: u64 = (0..p).map(|s| fig(s, 2) + fig(s, 3)).sum();
    let ranks = Ranks {
        heavy: heavy_threshold(keyed_total, p),
        right_holder: (0..p).map(|s| fig(s, 3) > 0).collect(),
        stripes: None,
    };
    let c = add_candidates(&mut v, &lay, shape, figs, cands, &ranks);
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
    let (dl, dr) = (merged.hl.estimate(), merged.hr.estimate());
    let mut hu = merged.hl.clone();
    hu.merge(&merged.hr);
    let du = hu.estimate();
    let dm = (dl + dr - du).clamp(0.0, dl.min(dr));
    let less = |s: usize, f: usize, cf: usize| (fig(s, f) - c.rows[s][cf]) as f64;
    let rest = Rest {
        p,
        kl,
        kr,
        lk: (0..p).map(|s| less(s, 2, 0)).collect(),
        rk: (0..p).map(|s| less(s, 3, 3)).collect(),
        lb: (0..p).map(|s| less(s, 4, 1)).collect(),
        rb: (0..p).map(|s| less(s, 5, 4)).collect(),
        rrest: (0..p).map(|s| less(s, 7, 5)).sum(),
        dl: (dl - c.left as f64).max(0.0),
        dr: (dr - c.right as f64).max(0.0),
        dm: (dm - c.both as f64).max(0.0),
        key_bytes: {
            let (n, b) = (0..p).fold((0, 0), |(n, b), s| (n + fig(s, 2), b + fig(s, 8)));
            if n > 0 {
                b as f64 / n as f64
            } else {
                0.0
            }
        },
        distinct_here: (0..p)
            .map(|s| merged.distinct[s].saturating_sub(c.here[s]) as f64)
            .collect(),
        right_holder: ranks.right_holder.clone(),
    };
    rest.add(&mut v, &lay, shape, &|s, o, f| figs[s][FIGS + 3 * o + f]);
    let mut ins = finish(&v, &lay, shape, machine, c.heavy, &merged.distinct)?;
    for pr in &mut ins.predictions {
        pr.bytes_exact = matches!(pr.strategy, Strategy::Shuffle | Strategy::Broadcast);
        pr.rows_exact = false;
    }
    let mut estimated: Vec<String> = ["output_rows", "output_bytes", "rows_out", "left_distinct"]
        .map(String::from)
        .to_vec();
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
        counters: merged.ml.capacity(),
        candidates: cands.len(),
        left_count_error: merged.ml.error(),
        right_count_error: merged.mr.error(),
        estimated,
    });
    Ok(ins)
}

/// What the candidates add up to: rows and bytes per rank (as a [`Summary`] summed), distinct
/// candidates with left, right and both rows, those with left rows per rank, and the heavy
/// keys among them.
struct CandidateTotals {
    rows: Vec<Summary>,
    left: u64,
    right: u64,
    both: u64,
    here: Vec<u64>,
    heavy: Vec<(Vec<u8>, bool)>,
}

/// Adds every candidate's moves to `v` exactly (as the exact inspector adds a key's).
fn add_candidates(
    v: &mut [u64],
    lay: &Layout,
    shape: &JoinShape,
    figs: &[Vec<u64>],
    cands: &[&[u8]],
    ranks: &Ranks,
) -> CandidateTotals {
    let p = figs.len();
    let mut t = CandidateTotals {
        rows: vec![[0; 6]; p],
        left: 0,
        right: 0,
        both: 0,
        here: vec![0; p],
        heavy: Vec::new(),
    };
    let mut by_rank = Vec::with_capacity(p);
    for (c, &key) in cands.iter().enumerate() {
        by_rank.clear();
        let at = FIGS + 3 * p + 6 * c;
        for (s, f) in figs.iter().enumerate() {
            let e: Summary = f[at..at + 6].try_into().expect("6");
            if e.iter().any(|&x| x > 0) {
                by_rank.push((s, e));
                for (a, x) in t.rows[s].iter_mut().zip(e) {
                    *a += x;
                }
                t.here[s] += (e[0] > 0) as u64;
            }
        }
        let (lc, rc) = by_rank
            .iter()
            .fold((0, 0), |(a, b), (_, e)| (a + e[0], b + e[3]));
        t.left += (lc > 0) as u64;
        t.right += (rc > 0) as u64;
        t.both += (lc > 0 && rc > 0) as u64;
        if by_rank.is_empty() {
            continue;
        }
        if let Some(bl) = add_key(v, lay, shape, key, owner(key, p), &by_rank, ranks) {
            t.heavy.push((key.to_vec(), bl));
        }
    }
    t
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
        let lbytes = mean(self.lb.iter().sum(), nl);
        let rbytes = mean(self.rb.iter().sum(), nr);
        let rrest = mean(self.rrest, nr);
        let out_bytes = pairs * (lbytes + rrest)
            + ul * (lbytes + shape.rrest.len() as f64)
            + ur * (rbytes + shape.lrest.len() as f64);
        add(v, lay.global(0), pairs);
        add(v, lay.global(1), out_bytes);
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
        let m = Matches {
            al,
            mr,
            pairs,
            rrest,
        };
        self.add_matched(v, lay, &owned, &m);
    }

    /// Adds the moves that follow the rest's matches (estimated): the semi-joins' key lists
    /// and matched rows back, the Bloom filters' passes, the join index's entries and rows.
    fn add_matched(&self, v: &mut [u64], lay: &Layout, owned: &[f64], m: &Matches) {
        let p = self.p;
        // The chance a rank holds some left row of a matched key.
        let held: Vec<f64> = (0..p)
            .map(|q| 1.0 - (1.0 - share(&self.lk, q)).powf(m.al))
            .collect();
        let fp = false_positives();
        let ae = INDEX_ENTRY as f64;
        for s in 0..p {
            let (ls, rs, os) = (share(&self.lk, s), share(&self.rk, s), share(owned, s));
            // Right rows of matched keys here, and their mean bytes.
            let matched = m.mr * rs;
            let rbs = mean(self.rb[s], self.rk[s]);
            // Semi-join: key lists to the other right holders, matched right rows back.
            let list = self.distinct_here[s] * self.key_bytes;
            for q in (0..p).filter(|&q| q != s && self.right_holder[q] && list > 0.0) {
                add(v, lay.slot(SEMI, SENT, s), list);
                add(v, lay.slot(SEMI, RECV, q), list);
            }
            if self.lk[s] > 0.0 {
                add(v, lay.slot(SEMI, ROWS_IN, s), self.lk[s] + m.mr * held[s]);
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
            add(v, lay.slot(INDEX, SENT, s), ae * m.pairs * os * (1.0 - rs));
            add(v, lay.slot(INDEX, RECV, s), ae * m.pairs * rs * (1.0 - os));
            let per = ROW_NUMBER as f64 + m.rrest;
            add(v, lay.slot(INDEX, SENT, s), m.pairs * rs * (1.0 - ls) * per);
            add(v, lay.slot(INDEX, RECV, s), m.pairs * ls * (1.0 - rs) * per);
        }
    }
}

/// The rest's match model: mean left rows a key, matched right rows, pairs, mean non-key
/// bytes of a right row.
struct Matches {
    al: f64,
    mr: f64,
    pairs: f64,
    rrest: f64,
}

/// `b` over `n` (0 for none).
fn mean(b: f64, n: f64) -> f64 {
    if n > 0.0 {
        b / n
    } else {
        0.0
    }
}

/// `x[s]`'s share of the sum of `x` (0 for none).
fn share(x: &[f64], s: usize) -> f64 {
    let t: f64 = x.iter().sum();
    if t > 0.0 {
        x[s] / t
    } else {
        0.0
    }
}
