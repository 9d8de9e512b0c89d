//! Branch and bound in the manner of opt_einsum's `branch`: at each step rank the pairs by
//! `size(out) - size(a) - size(b)` and recurse into the best `width` of them, pruning paths
//! that cannot beat the best found or that fall far behind it.

use super::PairPath;
use crate::bits::Bits;
use crate::net::Net;

/// How much worse than the best at the same depth a partial path may be before it is dropped.
const CUTOFF_FACTOR: f64 = 4.0;

struct Search<'n, 'p, 'a, const W: usize> {
    net: &'n Net<'p, 'a, W>,
    width: Option<usize>,
    best_cost: f64,
    best_size: f64,
    best_path: Option<PairPath>,
    /// Best cost seen with `k` nodes created so far, indexed by `k`.
    progress: Vec<f64>,
    /// Size of each node, parallel to the `nodes` of the recursion (computed once per node).
    sizes: Vec<f64>,
}

struct Cand<const W: usize> {
    heuristic: f64,
    step_cost: f64,
    cost: f64,
    size: f64,
    size12: f64,
    i: usize,
    j: usize,
    k12: Bits<W>,
}

impl<const W: usize> Search<'_, '_, '_, W> {
    fn recurse(
        &mut self,
        nodes: &mut Vec<Bits<W>>,
        remaining: &[usize],
        path: &mut PairPath,
        cost: f64,
        size: f64,
    ) {
        if remaining.len() == 1 {
            self.best_cost = cost;
            self.best_size = size;
            self.best_path = Some(path.clone());
            return;
        }
        // Index multiplicities among live nodes: an index in exactly one or two of them.
        let (mut ge1, mut ge2, mut ge3) = (Bits::<W>::EMPTY, Bits::<W>::EMPTY, Bits::<W>::EMPTY);
        for &r in remaining {
            let t = nodes[r];
            ge3 = ge3 | (ge2 & t);
            ge2 = ge2 | (ge1 & t);
            ge1 = ge1 | t;
        }
        let once = ge1.minus(ge2).minus(self.net.output);
        let twice = ge2.minus(ge3).minus(self.net.output);
        let depth = nodes.len();
        let mut cands: Vec<Cand<W>> = Vec::new();
        for outer in [false, true] {
            for (x, &i) in remaining.iter().enumerate() {
                for &j in &remaining[x + 1..] {
                    let (k1, k2) = (nodes[i], nodes[j]);
                    if !outer && !k1.intersects(&k2) {
                        continue;
                    }
                    let removed = ((k1 ^ k2) & once) | ((k1 & k2) & twice);
                    let k12 = (k1 | k2).minus(removed);
                    let step_cost = self.net.step_cost(k1, k2, k12);
                    let size12 = self.net.size(k12);
                    let new_cost = cost + step_cost;
                    let new_size = size.max(size12);
                    let better = new_cost < self.best_cost
                        || (new_cost == self.best_cost && new_size < self.best_size);
                    if !better {
                        continue;
                    }
                    // Over the limit: never taken, so it must not set the pace either.
                    if size12 > self.net.limit {
                        continue;
                    }
                    if new_cost < self.progress[depth] {
                        self.progress[depth] = new_cost;
                    } else if new_cost > CUTOFF_FACTOR * self.progress[depth] {
                        continue;
                    }
                    let heuristic = size12 - self.sizes[i] - self.sizes[j];
                    cands.push(Cand {
                        heuristic,
                        step_cost,
                        cost: new_cost,
                        size: new_size,
                        size12,
                        i,
                        j,
                        k12,
                    });
                }
            }
            if !cands.is_empty() {
                break;
            }
        }
        cands.sort_by(|a, b| {
            a.heuristic
                .total_cmp(&b.heuristic)
                .then(a.step_cost.total_cmp(&b.step_cost))
                .then(a.cost.total_cmp(&b.cost))
                .then(a.size.total_cmp(&b.size))
                .then((a.i, a.j).cmp(&(b.i, b.j)))
        });
        let take = self.width.unwrap_or(usize::MAX);
        for c in cands.into_iter().take(take) {
            let new_id = nodes.len();
            nodes.push(c.k12);
            self.sizes.push(c.size12);
            let rest: Vec<usize> = remaining
                .iter()
                .copied()
                .filter(|r| *r != c.i && *r != c.j)
                .chain(std::iter::once(new_id))
                .collect();
            path.push((c.i, c.j));
            self.recurse(nodes, &rest, path, c.cost, c.size);
            path.pop();
            nodes.pop();
            self.sizes.pop();
        }
    }
}

/// The best path found, or `None` when no path keeps within the memory limit.
pub(crate) fn branch<const W: usize>(
    net: &Net<'_, '_, W>,
    width: Option<usize>,
) -> Option<PairPath> {
    let n = net.n();
    if n <= 1 {
        return Some(PairPath::new());
    }
    let mut s = Search {
        net,
        width,
        best_cost: f64::INFINITY,
        best_size: f64::INFINITY,
        best_path: None,
        progress: vec![f64::INFINITY; 2 * n],
        sizes: net.inputs.iter().map(|k| net.size(*k)).collect(),
    };
    let mut nodes = net.inputs.clone();
    let remaining: Vec<usize> = (0..n).collect();
    s.recurse(&mut nodes, &remaining, &mut PairPath::new(), 0.0, 0.0);
    s.best_path
}
