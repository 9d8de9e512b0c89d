//! Enumeration of candidate process grids over a group's iteration space.

/// True when splitting `n` into `p` ceil-sized blocks leaves no block empty (other `p` are
/// dominated: the same blocks on fewer ranks).
pub fn tight(n: usize, p: usize) -> bool {
    p >= 1 && p <= n && n.div_ceil(n.div_ceil(p)) == p
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
    walk_grids(extents, procs, slack, |t, _| push_flat(&mut out, t));
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
fn balanced(w: u128, least: u128, slack: f64) -> bool {
    let limit = (least as f64) * (1.0 + slack.max(0.0));
    (w as f64) <= limit * (1.0 + 1e-12)
}

/// [`enumerate_flat`]'s tuples, in the same order, that balance the work: whose work is
/// within `1 + max(slack, 0)` of the least among them; with their count. Only tuples within
/// the least work seen so far are stored (that bound only tightens), so the list stays small.
pub(crate) fn balanced_flat(extents: &[usize], procs: usize, slack: f64) -> (Vec<usize>, usize) {
    let mut out = Vec::new();
    let mut works: Vec<u128> = Vec::new();
    let mut least = u128::MAX;
    walk_grids(extents, procs, slack, |t, w| {
        least = least.min(w);
        if balanced(w, least, slack) {
            push_flat(&mut out, t);
            works.push(w);
        }
    });
    let nd = extents.len().max(1);
    let mut kept = 0;
    for (i, &w) in works.iter().enumerate() {
        if balanced(w, least, slack) {
            out.copy_within(i * nd..(i + 1) * nd, kept * nd);
            kept += 1;
        }
    }
    out.truncate(kept * nd);
    (out, kept)
}

/// Calls `leaf` with every tuple [`enumerate`] lists, in its order, and the tuple's work (the
/// product of its ceil blocks `ceil(n_v / p_v)`: the busiest box).
fn walk_grids(extents: &[usize], procs: usize, slack: f64, mut leaf: impl FnMut(&[usize], u128)) {
    let cands: Vec<Vec<usize>> = extents
        .iter()
        .map(|&n| axis_candidates(n.max(1), procs))
        .collect();
    // Per index and candidate, the ceil block it leaves (what the work multiplies).
    let blocks: Vec<Vec<u128>> = extents
        .iter()
        .zip(&cands)
        .map(|(&n, c)| c.iter().map(|&p| n.div_ceil(p) as u128).collect())
        .collect();
    let cap = procs;
    let mut maxrest = vec![1usize; extents.len() + 1];
    for v in (0..extents.len()).rev() {
        let m = *cands[v].last().unwrap_or(&1);
        maxrest[v] = maxrest[v + 1].saturating_mul(m);
    }
    let mut top = maxrest[0].min(cap);
    loop {
        let lo = ((top as f64) / (1.0 + 2.0 * slack)).ceil().max(1.0) as usize;
        let mut cur = Vec::with_capacity(extents.len());
        let walk = Walk {
            cands: &cands,
            blocks: &blocks,
            maxrest: &maxrest,
            lo,
            cap,
        };
        let mut found = false;
        walk.dfs(0, 1, 1, &mut cur, &mut |t, w| {
            found = true;
            leaf(t, w);
        });
        if found || lo <= 1 {
            return;
        }
        // No grid reaches lo: the achievable maximum is lower; retry below it.
        top = lo - 1;
    }
}

/// The depth-first walk over per-index sizes.
struct Walk<'a> {
    cands: &'a [Vec<usize>],
    blocks: &'a [Vec<u128>],
    maxrest: &'a [usize],
    lo: usize,
    cap: usize,
}

impl Walk<'_> {
    fn dfs(
        &self,
        v: usize,
        prod: usize,
        work: u128,
        cur: &mut Vec<usize>,
        leaf: &mut impl FnMut(&[usize], u128),
    ) {
        if v == self.cands.len() {
            if prod >= self.lo {
                leaf(cur, work);
            }
            return;
        }
        if prod.saturating_mul(self.maxrest[v]) < self.lo {
            return;
        }
        for (&p, &b) in self.cands[v].iter().zip(&self.blocks[v]) {
            let np = match prod.checked_mul(p) {
                Some(x) if x <= self.cap => x,
                _ => break,
            };
            cur.push(p);
            self.dfs(v + 1, np, work.wrapping_mul(b), cur, leaf);
            cur.pop();
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
        let cases: [(&[usize], usize, f64); 5] = [
            (&[192, 192, 192, 192, 192, 68], 512, 0.25),
            (&[10, 10, 10], 8, 0.25),
            (&[4872, 4872, 120], 4096, 0.0),
            (&[7, 3], 1000, 0.5),
            (&[], 16, 0.25),
        ];
        for (ext, procs, slack) in cases {
            let nd = ext.len().max(1);
            let all = enumerate_flat(ext, procs, slack);
            let work = |t: &[usize]| -> u128 {
                ext.iter()
                    .zip(t)
                    .map(|(&n, &p)| n.div_ceil(p) as u128)
                    .product()
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
