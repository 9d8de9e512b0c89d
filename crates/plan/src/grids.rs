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
    let cands: Vec<Vec<usize>> = extents
        .iter()
        .map(|&n| axis_candidates(n.max(1), procs))
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
        let mut out = Vec::new();
        let mut cur = Vec::with_capacity(extents.len());
        let walk = Walk {
            cands: &cands,
            maxrest: &maxrest,
            lo,
            cap,
        };
        walk.dfs(0, 1, &mut cur, &mut out);
        if !out.is_empty() || lo <= 1 {
            return out;
        }
        // No grid reaches lo: the achievable maximum is lower; retry below it.
        top = lo - 1;
    }
}

/// The depth-first walk over per-index sizes.
struct Walk<'a> {
    cands: &'a [Vec<usize>],
    maxrest: &'a [usize],
    lo: usize,
    cap: usize,
}

impl Walk<'_> {
    fn dfs(&self, v: usize, prod: usize, cur: &mut Vec<usize>, out: &mut Vec<usize>) {
        if v == self.cands.len() {
            if prod >= self.lo {
                if cur.is_empty() {
                    out.push(0);
                }
                out.extend_from_slice(cur);
            }
            return;
        }
        if prod.saturating_mul(self.maxrest[v]) < self.lo {
            return;
        }
        for &p in &self.cands[v] {
            let np = match prod.checked_mul(p) {
                Some(x) if x <= self.cap => x,
                _ => break,
            };
            cur.push(p);
            self.dfs(v + 1, np, cur, out);
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
}
