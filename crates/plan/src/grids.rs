//! Enumeration of candidate process grids over a group's iteration space.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use crate::busiest_len;

/// True when splitting `n` into `p` ceil-sized blocks leaves no block empty (other `p` are
/// dominated: the same blocks on fewer ranks).
pub fn tight(n: usize, p: usize) -> bool {
    p >= 1 && p <= n && n.div_ceil(busiest_len(n, p)) == p
}

/// True when every prime factor of `p` is at most 7.
fn smooth7(mut p: usize) -> bool {
    for f in [2, 3, 5, 7] {
        while p > 1 && p.is_multiple_of(f) {
            p /= f;
        }
    }
    p == 1
}

/// Per-index candidate sizes: tight sizes up to `min(n, procs)` that are small, 7-smooth, or
/// divide `procs` (so the enumeration stays small for P = 2^20 while P itself and its divisors
/// are always reachable).
pub fn axis_candidates(n: usize, procs: usize) -> Vec<usize> {
    (1..=n.min(procs))
        .filter(|&p| tight(n, p) && (p <= 64 || smooth7(p) || procs.is_multiple_of(p)))
        .collect()
}

/// All tuples `(p_v)` with `p_v` from `axis_candidates(n_v, procs)` and
/// `lo <= prod p_v <= procs`, where `lo` is the largest achievable product divided by
/// `1 + 2 * slack` (smaller grids cannot balance the work within `slack`).
pub fn enumerate(extents: &[usize], procs: usize, slack: f64) -> Vec<Vec<usize>> {
    let n = extents.len();
    let flat = enumerate_flat(extents, procs, slack);
    if n == 0 {
        return if flat.is_empty() {
            Vec::new()
        } else {
            vec![Vec::new()]
        };
    }
    flat.chunks(n).map(<[usize]>::to_vec).collect()
}

/// [`enumerate`]'s tuples one after another in one vector (`extents.len()` numbers each; for
/// no extents, one empty tuple is `[0]`): no allocation per grid.
pub(crate) fn enumerate_flat(extents: &[usize], procs: usize, slack: f64) -> Vec<usize> {
    let mut out = Vec::new();
    Axes::new(extents, procs).walk(slack, None, |t, _, _| push_flat(&mut out, t));
    out
}

/// Appends tuple `t` to a flat list (the empty tuple as `[0]`).
fn push_flat(out: &mut Vec<usize>, t: &[usize]) {
    if t.is_empty() {
        out.push(0);
    }
    out.extend_from_slice(t);
}

/// Whether work `w` is within `1 + max(slack, 0)` of the least work `least`.
#[cfg(test)]
fn balanced(w: u128, least: u128, slack: f64) -> bool {
    Limit::of(least, slack).admits(w)
}

/// The works within `1 + max(slack, 0)` of a least work: `w as f64 <= float`, tested on
/// integers when `float` is below 2^53 (where every integer is a float, so `w <= floor`
/// says the same without the slow `u128` conversion).
#[derive(Clone, Copy)]
struct Limit {
    float: f64,
    int: Option<u128>,
}

impl Limit {
    /// No limit (no least work yet).
    const NONE: Limit = Limit {
        float: f64::INFINITY,
        int: None,
    };

    /// The limit for the least work `least`.
    fn of(least: u128, slack: f64) -> Limit {
        let limit = (least as f64) * (1.0 + slack.max(0.0));
        let float = limit * (1.0 + 1e-12);
        let int = (float < 9_007_199_254_740_992.0).then(|| float.floor() as u128);
        Limit { float, int }
    }

    /// Whether work `w` is within it.
    fn admits(&self, w: u128) -> bool {
        match self.int {
            Some(m) => w <= m,
            None => (w as f64) <= self.float,
        }
    }
}

/// [`enumerate_flat`]'s tuples, in the same order, that balance the work: whose work is
/// within `1 + max(slack, 0)` of the least among them; with their count.
#[cfg(test)]
fn balanced_flat(extents: &[usize], procs: usize, slack: f64) -> (Vec<usize>, usize) {
    let axes = Axes::new(extents, procs);
    let b = axes.balanced(slack, |_| 0.0);
    let mut flat = Vec::new();
    for i in 0..b.count {
        push_flat(&mut flat, &b.sizes(&axes, i));
    }
    (flat, b.count)
}

/// The candidate sizes of every index of an iteration space ([`axis_candidates`]), and the
/// walk over their tuples.
pub(crate) struct Axes {
    extents: Vec<usize>,
    procs: usize,
    cands: Vec<Vec<usize>>,
}

/// The tuples that balance the work, each with the caller's figure ([`Axes::balanced`]).
pub(crate) struct Balanced {
    /// The tuples (shared with other groups over the same iteration space).
    tuples: Arc<Tuples>,
    /// Per tuple, the figure the caller computed of it.
    pub(crate) values: Vec<f64>,
    /// How many tuples.
    pub(crate) count: usize,
}

impl Balanced {
    /// Tuple `i`'s sizes.
    pub(crate) fn sizes(&self, axes: &Axes, i: usize) -> Vec<usize> {
        let nd = axes.extents.len();
        let w = self.tuples.width;
        (0..nd)
            .map(|v| axes.cands[v][self.tuples.at.get(i * w + v) as usize])
            .collect()
    }

    /// Whether tuple `i` uses all the ranks.
    pub(crate) fn uses_all(&self, i: usize) -> bool {
        self.tuples.full[i]
    }
}

/// The balanced tuples of one iteration space on one number of ranks: what a walk finds.
struct Tuples {
    /// The tuples' positions among the candidates, one tuple after another in
    /// [`enumerate_flat`]'s order, `width` numbers each (in the narrowest integer that
    /// holds them: there are millions of tuples at P = 4096).
    at: Positions,
    /// Numbers per tuple: the number of indices, and 1 for none (the empty tuple is `[0]`).
    width: usize,
    /// Per tuple, whether its sizes multiply to all the ranks.
    full: Vec<bool>,
    /// How many tuples.
    count: usize,
}

impl Tuples {
    /// Tuple `i`'s positions, into `out`.
    fn at_into(&self, i: usize, out: &mut Vec<u32>) {
        out.clear();
        let r = i * self.width..(i + 1) * self.width;
        match &self.at {
            Positions::U8(p) => out.extend(p[r].iter().map(|&a| u32::from(a))),
            Positions::U16(p) => out.extend(p[r].iter().map(|&a| u32::from(a))),
            Positions::U32(p) => out.extend_from_slice(&p[r]),
        }
    }
}

/// Candidate positions, each in a byte when every index has at most 256 candidates (the
/// usual case), else in two or four.
enum Positions {
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
}

impl Positions {
    /// Room for positions below `most`.
    fn for_most(most: usize) -> Positions {
        if most <= 1 << 8 {
            Positions::U8(Vec::new())
        } else if most <= 1 << 16 {
            Positions::U16(Vec::new())
        } else {
            Positions::U32(Vec::new())
        }
    }

    // The conversions cannot truncate: `for_most` chose a type that holds every position.
    fn push(&mut self, a: usize) {
        match self {
            Positions::U8(p) => p.push(a as u8),
            Positions::U16(p) => p.push(a as u16),
            Positions::U32(p) => p.push(a as u32),
        }
    }

    fn get(&self, i: usize) -> u32 {
        match self {
            Positions::U8(p) => u32::from(p[i]),
            Positions::U16(p) => u32::from(p[i]),
            Positions::U32(p) => p[i],
        }
    }

    fn len(&self) -> usize {
        match self {
            Positions::U8(p) => p.len(),
            Positions::U16(p) => p.len(),
            Positions::U32(p) => p.len(),
        }
    }

    fn copy_within(&mut self, src: std::ops::Range<usize>, dst: usize) {
        match self {
            Positions::U8(p) => p.copy_within(src, dst),
            Positions::U16(p) => p.copy_within(src, dst),
            Positions::U32(p) => p.copy_within(src, dst),
        }
    }

    fn truncate(&mut self, n: usize) {
        match self {
            Positions::U8(p) => p.truncate(n),
            Positions::U16(p) => p.truncate(n),
            Positions::U32(p) => p.truncate(n),
        }
    }
}

/// The walks done so far, by extents, ranks and slack: the candidate trees of one einsum
/// share most of their iteration spaces (the same first contraction, say), and a walk is
/// the same wherever its space comes from. Process-wide and bounded by [`WALKS_HELD`].
static WALKS: LazyLock<Mutex<Walks>> = LazyLock::new(Default::default);

/// Positions held in [`WALKS`] beyond which it is emptied before a new walk.
const WALKS_HELD: usize = 1 << 25;

/// A walk's key: extents, ranks, slack's bits.
type WalkKey = (Vec<usize>, usize, u64);

#[derive(Default)]
struct Walks {
    /// One cell per key; a second caller waits on the cell while the first walks.
    map: HashMap<WalkKey, Arc<OnceLock<Arc<Tuples>>>>,
    /// Positions held by the finished walks.
    held: usize,
}

impl Axes {
    /// The candidates of each of `extents` on `procs` ranks.
    pub(crate) fn new(extents: &[usize], procs: usize) -> Axes {
        Axes {
            extents: extents.to_vec(),
            procs,
            cands: extents
                .iter()
                .map(|&n| axis_candidates(n.max(1), procs))
                .collect(),
        }
    }

    /// Index `v`'s candidate sizes, ascending (what a tuple's positions refer to).
    pub(crate) fn candidates(&self, v: usize) -> &[usize] {
        &self.cands[v]
    }

    /// [`enumerate_flat`]'s tuples, in the same order, that balance the work: whose work is
    /// within `1 + max(slack, 0)` of the least among them; each with `value` of its
    /// positions among the candidates. The walk skips subtrees whose every tuple is out of
    /// balance with the least work seen so far (that bound only tightens) and keeps only
    /// tuples within it, so the list stays small.
    pub(crate) fn balanced(&self, slack: f64, mut value: impl FnMut(&[u32]) -> f64) -> Balanced {
        let tuples = self.tuples(slack);
        let mut at = Vec::with_capacity(tuples.width);
        let values = (0..tuples.count)
            .map(|i| {
                tuples.at_into(i, &mut at);
                value(&at)
            })
            .collect();
        Balanced {
            count: tuples.count,
            tuples,
            values,
        }
    }

    /// The walk of [`Self::balanced`], done once per extents, ranks and slack ([`WALKS`]).
    fn tuples(&self, slack: f64) -> Arc<Tuples> {
        let key = (self.extents.clone(), self.procs, slack.to_bits());
        let cell = {
            // A poisoned lock only means another walk panicked: the map is still sound.
            let mut walks = WALKS.lock().unwrap_or_else(|e| e.into_inner());
            if !walks.map.contains_key(&key) && walks.held > WALKS_HELD {
                walks.map.clear();
                walks.held = 0;
            }
            walks.map.entry(key).or_default().clone()
        };
        let mut fresh = false;
        let tuples = cell
            .get_or_init(|| {
                fresh = true;
                Arc::new(self.walk_tuples(slack))
            })
            .clone();
        if fresh {
            let mut walks = WALKS.lock().unwrap_or_else(|e| e.into_inner());
            walks.held += tuples.at.len();
        }
        tuples
    }

    /// The balanced tuples, walked.
    fn walk_tuples(&self, slack: f64) -> Tuples {
        let most = self.cands.iter().map(Vec::len).max().unwrap_or(0);
        let mut at_flat = Positions::for_most(most);
        let mut full = Vec::new();
        // Tuples from `since` on came after the least work was last lowered, so the walk
        // admitted them under the final limit; only those before need their work again.
        let (mut seen, mut since) = (u128::MAX, 0usize);
        let (least, pruned) = self.walk(slack, Some(slack), |sizes, at, w| {
            if w < seen {
                (seen, since) = (w, full.len());
            }
            if at.is_empty() {
                at_flat.push(0);
            }
            for &a in at {
                at_flat.push(a);
            }
            // The walk keeps products within the ranks: no overflow.
            full.push(sizes.iter().product::<usize>() == self.procs);
        });
        let nd = self.extents.len();
        let width = nd.max(1);
        let limit = Limit::of(least, slack);
        let recheck = if pruned { since } else { full.len() };
        let mut count = 0;
        for i in 0..full.len() {
            let keep = i >= recheck || limit.admits(self.work_at(&at_flat, i * width));
            if keep {
                at_flat.copy_within(i * width..(i + 1) * width, count * width);
                full[count] = full[i];
                count += 1;
            }
        }
        at_flat.truncate(count * width);
        full.truncate(count);
        Tuples {
            at: at_flat,
            width,
            full,
            count,
        }
    }

    /// The work of the tuple whose positions start at `start` of `at` (as the walk
    /// multiplies it).
    fn work_at(&self, at: &Positions, start: usize) -> u128 {
        (0..self.extents.len()).fold(1u128, |w, v| {
            let p = self.cands[v][at.get(start + v) as usize];
            w.wrapping_mul(busiest_len(self.extents[v], p) as u128)
        })
    }

    /// Calls `leaf` with every tuple [`enumerate`] lists, in its order, its positions among
    /// the candidates, and its work (the product of its ceil blocks `ceil(n_v / p_v)`: the
    /// busiest box); with `balance`, only with those within that slack of the least work
    /// seen before them (and maybe a few more). Returns the least work, and whether the
    /// filter applied (works are exact: the iteration space fits `u128`).
    fn walk(
        &self,
        slack: f64,
        balance: Option<f64>,
        mut leaf: impl FnMut(&[usize], &[usize], u128),
    ) -> (u128, bool) {
        let (extents, cands) = (&self.extents, &self.cands);
        // Per index and candidate, the ceil block it leaves (what the work multiplies).
        let blocks: Vec<Vec<u128>> = extents
            .iter()
            .zip(cands)
            .map(|(&n, c)| c.iter().map(|&p| busiest_len(n, p) as u128).collect())
            .collect();
        let cap = self.procs;
        let nd = extents.len();
        let mut maxrest = vec![1usize; nd + 1];
        // Over the indices from v on: the least product of their blocks, and of their
        // extents (the bounds on a subtree's work).
        let mut minrest = vec![1u128; nd + 1];
        let mut extrest = vec![Some(1u128); nd + 1];
        for v in (0..nd).rev() {
            let m = *cands[v].last().unwrap_or(&1);
            maxrest[v] = maxrest[v + 1].saturating_mul(m);
            let b = blocks[v].last().copied().unwrap_or(1);
            minrest[v] = minrest[v + 1].saturating_mul(b);
            extrest[v] = extrest[v + 1].and_then(|e| e.checked_mul(extents[v] as u128));
        }
        // Pruning needs exact works: off when the iteration space overflows u128.
        let balance = balance.filter(|_| extrest[0].is_some());
        let mut top = maxrest[0].min(cap);
        loop {
            let lo = ((top as f64) / (1.0 + 2.0 * slack)).ceil().max(1.0) as usize;
            let mut cur = Vec::with_capacity(nd);
            let mut at = Vec::with_capacity(nd);
            let mut found = false;
            let mut walk = Walk {
                cands,
                blocks: &blocks,
                maxrest: &maxrest,
                minrest: &minrest,
                extrest: &extrest,
                lo,
                cap,
                balance,
                least: u128::MAX,
                limit: Limit::NONE,
            };
            walk.dfs(0, 1, 1, (&mut cur, &mut at), &mut |t, a, w| {
                found = true;
                leaf(t, a, w);
            });
            if found || lo <= 1 {
                return (walk.least, balance.is_some());
            }
            // No grid reaches lo: the achievable maximum is lower; retry below it.
            top = lo - 1;
        }
    }
}

/// The depth-first walk over per-index sizes.
struct Walk<'a> {
    cands: &'a [Vec<usize>],
    blocks: &'a [Vec<u128>],
    maxrest: &'a [usize],
    minrest: &'a [u128],
    extrest: &'a [Option<u128>],
    lo: usize,
    cap: usize,
    /// The slack of the work filter, when the walk applies it.
    balance: Option<f64>,
    /// The least work of a tuple met so far.
    least: u128,
    /// The limit of `least` (none with none yet).
    limit: Limit,
}

/// The tuple being built: its sizes and their positions among the candidates.
type Cursor<'c> = (&'c mut Vec<usize>, &'c mut Vec<usize>);

impl Walk<'_> {
    /// Notes a tuple's work `w`; whether it is within the limit.
    fn admit(&mut self, w: u128) -> bool {
        if w < self.least {
            self.least = w;
            if let Some(slack) = self.balance {
                self.limit = Limit::of(w, slack);
            }
        }
        self.limit.admits(w)
    }

    fn dfs(
        &mut self,
        v: usize,
        prod: usize,
        work: u128,
        cur: Cursor,
        leaf: &mut impl FnMut(&[usize], &[usize], u128),
    ) {
        let (sizes, at) = cur;
        if v == self.cands.len() {
            if prod >= self.lo && self.admit(work) {
                leaf(sizes, at, work);
            }
            return;
        }
        if prod.saturating_mul(self.maxrest[v]) < self.lo {
            return;
        }
        if self.balance.is_some() && v + 1 == self.cands.len() {
            return self.last(prod, work, (sizes, at), leaf);
        }
        if self.balance.is_some() && self.least != u128::MAX {
            // Every tuple below has work at least `work` times the larger of the least
            // blocks left and the extents left over the most ranks left.
            let most = (self.cap / prod).max(1) as u128;
            let rest = self.extrest[v].unwrap_or(u128::MAX).div_ceil(most);
            let lb = work.saturating_mul(self.minrest[v].max(rest));
            if !self.limit.admits(lb) {
                return;
            }
        }
        for (i, (&p, &b)) in self.cands[v].iter().zip(&self.blocks[v]).enumerate() {
            let np = match prod.checked_mul(p) {
                Some(x) if x <= self.cap => x,
                _ => break,
            };
            sizes.push(p);
            at.push(i);
            self.dfs(v + 1, np, work.wrapping_mul(b), (sizes, at), leaf);
            sizes.pop();
            at.pop();
        }
    }

    /// The last index under the work filter: its sizes that keep the product within
    /// `[lo, cap]` form a range whose largest has the least work (blocks shrink as sizes
    /// grow), and those within the limit are the top of that range.
    fn last(
        &mut self,
        prod: usize,
        work: u128,
        cur: Cursor,
        leaf: &mut impl FnMut(&[usize], &[usize], u128),
    ) {
        let (sizes, at) = cur;
        let v = self.cands.len() - 1;
        let (c, b) = (&self.cands[v], &self.blocks[v]);
        // prod * p <= cap and prod * p >= lo, on the sizes alone.
        let (room, need) = (self.cap / prod, self.lo.div_ceil(prod));
        let end = c.partition_point(|&p| p <= room);
        let start = c.partition_point(|&p| p < need);
        if start >= end || !self.admit(work.wrapping_mul(b[end - 1])) {
            return;
        }
        let mut first = end - 1;
        while first > start && self.limit.admits(work.wrapping_mul(b[first - 1])) {
            first -= 1;
        }
        for i in first..end {
            sizes.push(c[i]);
            at.push(i);
            leaf(sizes, at, work.wrapping_mul(b[i]));
            sizes.pop();
            at.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tight_sizes() {
        assert!(tight(10, 5));
        assert!(tight(10, 4)); // blocks 3,3,3,1
        assert!(tight(10, 10));
        assert!(!tight(10, 7)); // blocks of 2 -> only 5 nonempty
        assert!(!tight(3, 4));
    }

    #[test]
    fn enumerate_mm_cube() {
        let g = enumerate(&[10, 10, 10], 8, 0.25);
        assert!(g.contains(&vec![2, 2, 2]));
        assert!(g.iter().all(|t| t.iter().product::<usize>() <= 8));
    }

    #[test]
    fn enumerate_large_p_small_extents() {
        let g = enumerate(&[10, 10, 10, 10], 1 << 20, 0.25);
        assert!(g.contains(&vec![10, 10, 10, 10]));
    }

    #[test]
    fn balanced_flat_is_the_balanced_part_of_enumerate_flat() {
        // The fifth has over 256 candidates for an index (positions in two bytes); the last
        // overflows u128: the walk cannot prune and every work is rechecked.
        let cases: [(&[usize], usize, f64); 7] = [
            (&[192, 192, 192, 192, 192, 68], 512, 0.25),
            (&[10, 10, 10], 8, 0.25),
            (&[4872, 4872, 120], 4096, 0.0),
            (&[7, 3], 1000, 0.5),
            (&[], 16, 0.25),
            (&[3_628_800, 3], 3_628_800, 0.25),
            (&[1 << 40, 1 << 40, 1 << 40, 1 << 40], 16, 0.25),
        ];
        assert!(axis_candidates(3_628_800, 3_628_800).len() > 256);
        for (ext, procs, slack) in cases {
            let nd = ext.len().max(1);
            let all = enumerate_flat(ext, procs, slack);
            let work = |t: &[usize]| -> u128 {
                ext.iter()
                    .zip(t)
                    .fold(1u128, |w, (&n, &p)| w.wrapping_mul(n.div_ceil(p) as u128))
            };
            let least = all.chunks(nd).map(work).min().unwrap_or(1);
            let want: Vec<usize> = all
                .chunks(nd)
                .filter(|t| balanced(work(t), least, slack))
                .flatten()
                .copied()
                .collect();
            let (got, count) = balanced_flat(ext, procs, slack);
            assert_eq!(got, want, "{ext:?} on {procs}");
            assert_eq!(count, want.len() / nd);
        }
    }
}
