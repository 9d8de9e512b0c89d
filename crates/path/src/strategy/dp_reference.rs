//! The previous implementation of [`super::dp`], kept as the oracle of its tests (a level of
//! entries in a hash map, partners found through per-operand lists): the new one must return
//! paths of the same cost on every problem and bound.

use crate::bits::Bits;
use crate::bits::FastMap;
use crate::net::Net;
use crate::strategy::PairPath;
const MAX_OPERANDS: usize = 128;

/// Cap raises tried before the cap is lifted altogether.
const MAX_ROUNDS: usize = 1024;

struct Entry<const W: usize> {
    set: u128,
    ind: Bits<W>,
    cost: f64,
    nbr: u128,
    left: u128,
}

struct Level<const W: usize> {
    entries: Vec<Entry<W>>,
    pos: FastMap<u128, usize>,
    /// Per operand, (set, cost + size, cost, entry) of the entries holding it, by increasing
    /// cost + size: a compact copy taken once the level is complete, so partner scans are
    /// sequential and stop early (a step costs at least the size of either operand).
    by_tensor: Vec<Vec<(u128, f64, f64, u32)>>,
}

impl<const W: usize> Level<W> {
    fn new(n: usize) -> Self {
        Level {
            entries: Vec::new(),
            pos: FastMap::default(),
            by_tensor: vec![Vec::new(); n],
        }
    }

    /// Rebuilds `by_tensor` from the entries; `size` gives an entry's result size (or 0).
    fn freeze(&mut self, size: impl Fn(Bits<W>) -> f64) {
        for l in self.by_tensor.iter_mut() {
            l.clear();
        }
        for (i, e) in self.entries.iter().enumerate() {
            let key = e.cost + size(e.ind);
            for t in ones(e.set) {
                self.by_tensor[t].push((e.set, key, e.cost, i as u32));
            }
        }
        for l in self.by_tensor.iter_mut() {
            l.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.3.cmp(&b.3)));
        }
    }
}

fn ones(mut m: u128) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let t = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(t)
        }
    })
}

struct Dp<'n, 'p, 'a, const W: usize> {
    net: &'n Net<'p, 'a, W>,
    /// Operands holding each index.
    holders: Vec<u128>,
    /// Operands sharing a non-output index with each operand.
    nbr_leaf: Vec<u128>,
    leaf_size: Vec<f64>,
}

impl<const W: usize> Dp<'_, '_, '_, W> {
    /// Indices of the result over operand set `s`, from the union of its two parts.
    fn result(&self, s: u128, u: Bits<W>) -> Bits<W> {
        let mut r = u;
        for d in u.minus(self.net.output).ones() {
            if self.holders[d] & !s == 0 {
                r = r.minus(single(d));
            }
        }
        r
    }

    /// Solves one connected component; returns its levels (for rebuilding the tree).
    ///
    /// Rounds with a rising cost cap: the first round whose cap reaches the optimum finds it.
    /// `limit`, when the caller knows a feasible path's cost, is the highest cap: the rounds
    /// stop there (`None` if none reached the whole component), and the first round is at the
    /// limit itself rather than at the trivial floor: the rounds below the optimum, which a
    /// rising cap spends, are skipped (rand14: 2.3x opt_einsum's auto instead of 1.1x).
    fn component(&self, g: u128, limit: Option<f64>) -> Option<Vec<Level<W>>> {
        let builtin = self.net.builtin().is_some();
        let n = self.net.n();
        let size = g.count_ones() as usize;
        let mut levels: Vec<Level<W>> = (0..=size).map(|_| Level::new(n)).collect();
        for t in ones(g) {
            let l = &mut levels[1];
            l.pos.insert(1u128 << t, l.entries.len());
            l.entries.push(Entry {
                set: 1u128 << t,
                ind: self.net.inputs[t],
                cost: 0.0,
                nbr: self.nbr_leaf[t],
                left: 0,
            });
        }
        levels[1].freeze(|b| if builtin { self.net.size(b) } else { 0.0 });
        if size == 1 {
            return Some(levels);
        }
        let all = ones(g).fold(Bits::<W>::EMPTY, |b, t| b | self.net.inputs[t]);
        // Every operand takes part in a step that costs at least its size (built-in models).
        let widest_leaf = if builtin {
            ones(g).map(|t| self.leaf_size[t]).fold(0.0, f64::max)
        } else {
            0.0
        };
        let floor = self
            .net
            .size(all & self.net.output)
            .max(widest_leaf)
            .max(1.0);
        let mut cap = limit.unwrap_or(floor);
        // A fine step keeps the last round (by far the costliest) close to the optimum.
        let increment = std::f64::consts::SQRT_2;
        // With a built-in model no tree costs more than 2 * (operands) * size(all indices), so a
        // cap above that is no cap: one unbounded round settles it.
        let ceiling = match self.net.builtin() {
            Some(_) => 2.0 * size as f64 * self.net.size(all),
            None => f64::INFINITY,
        };
        let mut rounds = 0;
        loop {
            for total in 2..=size {
                self.fill(g, &mut levels, total, cap);
            }
            if !levels[size].entries.is_empty() {
                return Some(levels);
            }
            if cap == f64::INFINITY || limit == Some(cap) {
                return None;
            }
            rounds += 1;
            cap *= increment;
            if rounds >= MAX_ROUNDS || !cap.is_finite() || cap >= ceiling {
                cap = f64::INFINITY;
            }
            if let Some(l) = limit {
                cap = cap.min(l);
            }
        }
    }

    /// Fills level `total` of component `g` from the smaller levels under cost cap `cap`.
    fn fill(&self, g: u128, levels: &mut [Level<W>], total: usize, cap: f64) {
        let builtin = self.net.builtin().is_some();
        let (lower, upper) = levels.split_at_mut(total);
        // Entries of earlier rounds stay: a higher cap only lowers their costs.
        let target = &mut upper[0];
        for m in 1..=total / 2 {
            let k = total - m;
            // Scan the larger part's entries and look its partners up in the smaller part's
            // per-operand lists: fewer of those overlap, so fewer are wasted.
            for big in &lower[k].entries {
                let big_size = self.net.size(big.ind);
                // A built-in step costs at least the size of its larger operand.
                let floor = if builtin { big_size } else { 0.0 };
                let budget = cap - big.cost - floor;
                if budget < 0.0 {
                    continue;
                }
                let small = &lower[m];
                let same = m == k;
                // Connected partners: sets that hold a neighbour of the larger part.
                self.partners(small, big, big.nbr, same, budget, cap, target, |_| true);
                // Outer-product partners: sets two hops away that meet a common neighbour at
                // least as large as the product.
                let widest = ones(big.nbr).map(|u| self.leaf_size[u]).fold(0.0, f64::max);
                if big_size > widest {
                    continue; // any product with this part outgrows every neighbour
                }
                let mut two_hops = 0u128;
                for u in ones(big.nbr) {
                    two_hops |= self.nbr_leaf[u];
                }
                two_hops &= !(big.set | big.nbr) & g;
                self.partners(small, big, two_hops, same, budget, cap, target, |e| {
                    let meet = ones(e.nbr & big.nbr)
                        .map(|c| self.leaf_size[c])
                        .fold(0.0, f64::max);
                    e.set & big.nbr == 0 && self.net.size(e.ind | big.ind) <= meet
                });
            }
        }
        target.freeze(|b| if builtin { self.net.size(b) } else { 0.0 });
    }

    /// Combines `big` with every entry of `small` that holds an operand of `via` (counted under
    /// the lowest such operand), is disjoint from `big`, fits the budgets and passes `accept`.
    #[allow(clippy::too_many_arguments)]
    fn partners(
        &self,
        small: &Level<W>,
        big: &Entry<W>,
        via: u128,
        same: bool,
        budget: f64,
        cap: f64,
        target: &mut Level<W>,
        accept: impl Fn(&Entry<W>) -> bool,
    ) {
        let key_budget = cap - big.cost;
        for t in ones(via) {
            for &(ss, key, cs, is) in &small.by_tensor[t] {
                if key > key_budget {
                    break;
                }
                if cs > budget || ss & big.set != 0 || (same && ss > big.set) {
                    continue;
                }
                if (ss & via).trailing_zeros() as usize != t {
                    continue; // counted under its lowest operand of `via`
                }
                let e = &small.entries[is as usize];
                if accept(e) {
                    self.combine(e, big, cap, target);
                }
            }
        }
    }

    fn combine(&self, e1: &Entry<W>, e2: &Entry<W>, cap: f64, target: &mut Level<W>) {
        let s = e1.set | e2.set;
        let base = e1.cost + e2.cost;
        if self.net.builtin().is_some() && base + self.net.size(e1.ind | e2.ind) > cap {
            return; // every built-in step costs at least the size of its iteration space
        }
        let ind = self.result(s, e1.ind | e2.ind);
        let cost = base + self.net.step_cost(e1.ind, e2.ind, ind);
        if cost > cap {
            return;
        }
        if let Some(&p) = target.pos.get(&s) {
            let e = &mut target.entries[p];
            if cost < e.cost {
                e.cost = cost;
                e.left = e1.set;
            }
            return;
        }
        if !self.net.fits(ind) {
            return;
        }
        let p = target.entries.len();
        target.pos.insert(s, p);
        target.entries.push(Entry {
            set: s,
            ind,
            cost,
            nbr: (e1.nbr | e2.nbr) & !s,
            left: e1.set,
        });
    }
}

fn single<const W: usize>(d: usize) -> Bits<W> {
    let mut b = Bits::EMPTY;
    b.insert(d);
    b
}

/// Appends the steps of set `s`'s tree; returns its node id.
fn emit<const W: usize>(s: u128, levels: &[Level<W>], n: usize, path: &mut PairPath) -> usize {
    if s.count_ones() == 1 {
        return s.trailing_zeros() as usize;
    }
    let level = &levels[s.count_ones() as usize];
    let left = level.entries[level.pos[&s]].left;
    let x = emit(left, levels, n, path);
    let y = emit(s ^ left, levels, n, path);
    path.push((x, y));
    n + path.len() - 1
}

/// The dp path, or `None` when it finds none within the memory limit. With `upper`, the cost
/// of a feasible path, no cap rises above it: `None` then also when no tree of this search's
/// space costs at most `upper`.
pub(crate) fn dp<const W: usize>(net: &Net<'_, '_, W>, upper: Option<f64>) -> Option<PairPath> {
    let n = net.n();
    if n <= 1 {
        return Some(PairPath::new());
    }
    assert!(n <= MAX_OPERANDS, "caller checks the operand count");
    let mut holders = vec![0u128; net.ext.len()];
    for (t, k) in net.inputs.iter().enumerate() {
        for d in k.ones() {
            holders[d] |= 1u128 << t;
        }
    }
    let nbr_leaf: Vec<u128> = (0..n)
        .map(|t| {
            net.inputs[t]
                .minus(net.output)
                .ones()
                .fold(0u128, |m, d| m | holders[d])
                & !(1u128 << t)
        })
        .collect();
    let d = Dp {
        net,
        holders,
        nbr_leaf,
        leaf_size: net.inputs.iter().map(|k| net.size(*k)).collect(),
    };
    // Connected components, in order of their lowest operand.
    let mut seen = 0u128;
    let mut parts: Vec<(usize, Bits<W>)> = Vec::new();
    let mut path = PairPath::new();
    for start in 0..n {
        if seen >> start & 1 == 1 {
            continue;
        }
        let mut comp = 1u128 << start;
        let mut frontier = comp;
        while frontier != 0 {
            let mut next = 0u128;
            for t in ones(frontier) {
                next |= d.nbr_leaf[t];
            }
            frontier = next & !comp;
            comp |= next;
        }
        seen |= comp;
        // Slack so that rounding in another summation order never prunes the bound's own tree.
        let limit = upper.map(|u| u * (1.0 + 1e-9) + 1e-9);
        let levels = d.component(comp, limit)?;
        let top = &levels[comp.count_ones() as usize];
        let ind = top.entries[top.pos[&comp]].ind;
        let id = emit(comp, &levels, n, &mut path);
        parts.push((id, ind));
    }
    // Join the parts pairwise, the two smallest first.
    while parts.len() > 1 {
        parts.sort_by(|a, b| net.size(a.1).total_cmp(&net.size(b.1)).then(a.0.cmp(&b.0)));
        let (ia, ka) = parts.remove(0);
        let (ib, kb) = parts.remove(0);
        let keep = parts.iter().fold(net.output, |m, p| m | p.1);
        let k12 = (ka | kb) & keep;
        if !net.fits(k12) {
            return None;
        }
        path.push((ia.min(ib), ia.max(ib)));
        parts.push((n + path.len() - 1, k12));
    }
    Some(path)
}
