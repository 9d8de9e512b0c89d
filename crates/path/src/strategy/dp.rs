//! Dynamic programming over connected subgraphs (as opt_einsum's `dp` and cotengra's
//! `optimal`): subtrees over connected sets of operands, built cheapest first (best first, so
//! only sets no costlier than the optimum are ever expanded) under an optional cost cap. Two
//! sets that do not share an index may also be joined (an outer product) when they meet a
//! common neighbour no smaller than their product, which is when an outer product can pay.
//! Disconnected parts are solved apart and joined smallest first.
//!
//! The space searched, exactly: a set of operands of one component is built either as a single
//! operand or from two disjoint built sets that share a summed index (or, not sharing one, meet
//! as above), and its result must fit the memory limit; the search returns the cheapest tree of
//! the component in that space whose cost is within the cap. Every pruning below is sound for
//! that minimum (costs are non-negative, and a built-in step costs at least its iteration
//! space); `reference` (tests only) is the earlier implementation it is checked against.
//!
//! [`dp_ways`] searches a larger space: each single operand that holds indices of its own is
//! consumed either as it is (its first step sums them) or after a step that sums them out of
//! it, whichever makes the tree cheaper, as `optimal` does; the outer-product rule reads each
//! such operand at its smaller form. So on a connected network its space holds the trees of
//! this search on the operands as they are and on the operands with those indices summed out.
//!
//! Each component is solved in its own numbering of operands (bit `i` is its `i`-th operand),
//! so a component of up to [`FLAT_MAX`] operands finds its subsets in a flat table.

use super::SsaPath;
use crate::bits::Bits;
use crate::bits::FastMap;
use crate::net::Net;
use crate::BuiltinCost;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Largest operand count (operand sets are 128-bit masks).
pub(crate) const MAX_OPERANDS: usize = 128;

/// Largest component whose subsets are looked up in a flat table of 2^n slots (64K x 4 bytes);
/// larger ones use a hash map.
const FLAT_MAX: usize = 16;

/// A built set of a component, its result and its cheapest tree so far.
#[derive(Clone, Copy)]
struct Entry<const W: usize> {
    /// Operands, in the component's numbering.
    set: u128,
    /// Result indices.
    ind: Bits<W>,
    /// Elements of the result.
    size: f64,
    /// Cost of the cheapest tree found.
    cost: f64,
    /// Operands outside `set` that share a summed index with it.
    nbr: u128,
    /// The first part of that tree's last step (0 for a single operand).
    left: u128,
    /// For a single operand, its summed indices that no other operand holds (its first step
    /// sums them); empty for a larger set, whose result holds no such index.
    own: Bits<W>,
    /// Whether `cost` is final (the set has left the queue).
    done: bool,
    /// With single-operand reductions ([`dp_ways`]): bit 0, the tree's first part (`left`) is
    /// a single operand reduced before the step; bit 1, the second part is.
    how: u8,
    /// The least size this entry can enter a step with: `size`, or a reducible single
    /// operand's size after its reduction (the outer-product rules read it, so that the
    /// search admits every product that either form of the operand would).
    small: f64,
}

/// A copy of a finished entry, as the partner scans read it.
#[derive(Clone, Copy)]
struct Scan<const W: usize> {
    /// `cost + size` with a built-in model (a step costs at least either operand's size),
    /// else `cost`: the least a tree using this entry costs.
    key: f64,
    e: Entry<W>,
    /// Largest operand among the neighbours (an outer product with this entry can pay only
    /// if its result is no larger than a common neighbour).
    widest: f64,
    /// Operands two hops away (neighbours of neighbours, outside the set and its neighbours).
    hops: u128,
}

/// The finished entries over sets of one size, in the order they finished (by cost).
#[derive(Default)]
struct Done<const W: usize> {
    scans: Vec<Scan<W>>,
    /// `scans[i].e.cost`, apart: the partner scan's binary search over them read a whole
    /// entry per probe and took a sixth of the search's time.
    costs: Vec<f64>,
    /// Operands held by any of `scans`: most expansions find no partner in most sizes, and
    /// this settles it before the scan.
    union: u128,
    /// `holds[w * c + t]` bit `i`: `scans[64 w + i]` holds operand `t` (of the `c`); so the
    /// partners of a set are found a word of 64 entries at a time, without reading those that
    /// overlap.
    holds: Vec<u64>,
}

impl<const W: usize> Done<W> {
    fn push(&mut self, scan: Scan<W>, c: usize) {
        let i = self.scans.len();
        if self.holds.len() < (i / 64 + 1) * c {
            // A new word of 64 entries for each operand.
            self.holds.resize((i / 64 + 1) * c, 0);
            self.scans.reserve(64);
        }
        for t in ones(scan.e.set) {
            self.holds[(i / 64) * c + t] |= 1u64 << (i % 64);
        }
        self.costs.push(scan.e.cost);
        self.union |= scan.e.set;
        self.scans.push(scan);
    }
}

/// Where a component's entries are found by set.
enum Table {
    /// Indexed by the set itself (components of up to [`FLAT_MAX`] operands): the entry id
    /// plus one, 0 for none (so the table starts as zeroed memory).
    Flat(Vec<u32>),
    Map(FastMap<u128, u32>),
}

impl Table {
    fn new(c: usize) -> Self {
        if c <= FLAT_MAX {
            Table::Flat(vec![0; 1 << c])
        } else {
            Table::Map(FastMap::default())
        }
    }

    fn get(&self, s: u128) -> Option<u32> {
        match self {
            Table::Flat(v) => v[s as usize].checked_sub(1),
            Table::Map(m) => m.get(&s).copied(),
        }
    }

    fn insert(&mut self, s: u128, id: u32) {
        match self {
            Table::Flat(v) => v[s as usize] = id + 1,
            Table::Map(m) => {
                m.insert(s, id);
            }
        }
    }
}

/// Tensor sizes from per-byte product tables when every index id fits one word (three
/// lookups instead of a loop over the indices, for the usual two dozen indices). Products of
/// extents are exact below 2^53 in any order, so these equal [`Net::size`] there.
struct Sizes {
    /// `bytes[j][v]`: product of the extents of the ids `8j + b` for the bits `b` of `v`.
    bytes: Vec<[f64; 256]>,
}

impl Sizes {
    fn new<const W: usize>(net: &Net<'_, '_, W>) -> Self {
        let ids = net.ext.len();
        if W != 1 || ids > 64 {
            return Sizes { bytes: Vec::new() };
        }
        let bytes = (0..ids.div_ceil(8))
            .map(|j| {
                // Doubling: the entries with bit `b` set are those without it times id
                // `8j + b`'s extent (a slice times a scalar: vectorized; a dp search of 10
                // operands built its tables in 7% of its time entry by entry).
                let mut t = [1.0; 256];
                for b in 0..8 {
                    let e = net.ext.get(8 * j + b).copied().unwrap_or(1.0);
                    let (lo, hi) = t.split_at_mut(1 << b);
                    for (h, &l) in hi[..1 << b].iter_mut().zip(lo.iter()) {
                        *h = l * e;
                    }
                }
                t
            })
            .collect();
        Sizes { bytes }
    }

    fn size<const W: usize>(&self, net: &Net<'_, '_, W>, s: Bits<W>) -> f64 {
        if self.bytes.is_empty() {
            return net.size(s);
        }
        let w = s.0[0];
        let b = |j: usize| (w >> (8 * j)) as usize & 255;
        match self.bytes.as_slice() {
            // Unrolled for up to 32 index ids, which most networks have.
            [t0] => t0[b(0)],
            [t0, t1] => t0[b(0)] * t1[b(1)],
            [t0, t1, t2] => t0[b(0)] * t1[b(1)] * t2[b(2)],
            [t0, t1, t2, t3] => t0[b(0)] * t1[b(1)] * t2[b(2)] * t3[b(3)],
            more => more.iter().enumerate().fold(1.0, |p, (j, t)| p * t[b(j)]),
        }
    }
}

/// The operands of a set, in increasing order (by 64-bit halves: most components fit the
/// lower one, and a 64-bit step is half the work of a 128-bit one).
fn ones(m: u128) -> Ones {
    Ones {
        lo: m as u64,
        hi: (m >> 64) as u64,
    }
}

struct Ones {
    lo: u64,
    hi: u64,
}

impl Iterator for Ones {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.lo != 0 {
            let t = self.lo.trailing_zeros() as usize;
            self.lo &= self.lo - 1;
            Some(t)
        } else if self.hi != 0 {
            let t = self.hi.trailing_zeros() as usize;
            self.hi &= self.hi - 1;
            Some(64 + t)
        } else {
            None
        }
    }
}

/// What the whole network shares: its net, each operand's neighbours and own indices.
struct Dp<'n, 'p, 'a, const W: usize, const WAYS: bool> {
    net: &'n Net<'p, 'a, W>,
    builtin: Option<BuiltinCost>,
    sizes: Sizes,
    /// Operands sharing a non-output index with each operand.
    nbr_leaf: Vec<u128>,
    /// Per operand, its non-output indices that no other operand holds (summed by its first
    /// step, which is the only step they can be candidates of while in no other operand).
    own: Vec<Bits<W>>,
    /// Per operand, when single-operand reductions are searched ([`dp_ways`]) and it has own
    /// indices: its indices after summing them out, and that step's cost.
    reduced: Vec<Option<(Bits<W>, f64)>>,
}

/// One connected component being solved, in its own numbering of operands.
struct Comp<'d, 'n, 'p, 'a, const W: usize, const WAYS: bool> {
    d: &'d Dp<'n, 'p, 'a, W, WAYS>,
    /// Global operand of each local one.
    ops: Vec<usize>,
    /// All local operands.
    full: u128,
    /// Local neighbours and sizes of each local operand.
    nbr: Vec<u128>,
    leaf_size: Vec<f64>,
    /// Local holders of each summed index of the component (0 for the other ids).
    holders: Vec<u128>,
}

/// The entries found so far and where each set's entry is.
struct Store<const W: usize> {
    entries: Vec<Entry<W>>,
    table: Table,
}

impl<const W: usize, const WAYS: bool> Dp<'_, '_, '_, W, WAYS> {
    fn size(&self, s: Bits<W>) -> f64 {
        self.sizes.size(self.net, s)
    }
}

impl<'d, 'n, 'p, 'a, const W: usize, const WAYS: bool> Comp<'d, 'n, 'p, 'a, W, WAYS> {
    fn new(d: &'d Dp<'n, 'p, 'a, W, WAYS>, g: u128) -> Self {
        let ops: Vec<usize> = ones(g).collect();
        let c = ops.len();
        let mut local = vec![0u128; d.net.n()];
        for (i, &t) in ops.iter().enumerate() {
            local[t] = 1u128 << i;
        }
        let to_local = |m: u128| ones(m).fold(0u128, |a, t| a | local[t]);
        let mut holders = vec![0u128; d.net.ext.len()];
        for (i, &t) in ops.iter().enumerate() {
            for x in d.net.inputs[t].minus(d.net.output).ones() {
                holders[x] |= 1u128 << i;
            }
        }
        Comp {
            d,
            full: if c == 128 {
                u128::MAX
            } else {
                (1u128 << c) - 1
            },
            nbr: ops.iter().map(|&t| to_local(d.nbr_leaf[t])).collect(),
            leaf_size: ops.iter().map(|&t| d.size(d.net.inputs[t])).collect(),
            holders,
            ops,
        }
    }

    /// An entry as the partner scans read it.
    fn scan(&self, e: &Entry<W>) -> Scan<W> {
        let mut widest = 0.0;
        let mut hops = 0u128;
        for u in ones(e.nbr) {
            widest = f64::max(widest, self.leaf_size[u]);
            hops |= self.nbr[u];
        }
        Scan {
            key: if self.d.builtin.is_some() {
                e.cost + e.size
            } else {
                e.cost
            },
            e: *e,
            widest,
            hops: hops & !(e.set | e.nbr) & self.full,
        }
    }

    /// The cheapest tree of the component within `limit`, best first: sets leave a queue by
    /// increasing cost, and each set leaving it is joined with every finished set it may join.
    /// A set's cost is final when it leaves (a step costs nothing negative, so no tree formed
    /// later is cheaper: Knuth's generalisation of Dijkstra's search), so the search stops when
    /// the whole component leaves, having expanded only sets no costlier than the optimum.
    /// `None` if no tree within `limit` exists; else the entries found.
    fn solve(&self, limit: Option<f64>) -> Option<Store<W>> {
        let c = self.ops.len();
        let mut store = Store {
            entries: Vec::with_capacity(8 * c),
            table: Table::new(c),
        };
        // By (cost, entry id); costs are non-negative, so their bits order as they do.
        let mut queue: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::with_capacity(4 * c);
        for (i, &t) in self.ops.iter().enumerate() {
            let id = store.entries.len() as u32;
            store.entries.push(Entry {
                set: 1u128 << i,
                ind: self.d.net.inputs[t],
                size: self.leaf_size[i],
                cost: 0.0,
                nbr: self.nbr[i],
                left: 0,
                own: self.d.own[t],
                done: false,
                how: 0,
                small: self.d.reduced[t].map_or(self.leaf_size[i], |(r, _)| self.d.size(r)),
            });
            store.table.insert(1u128 << i, id);
            queue.push(Reverse((0.0f64.to_bits(), id)));
        }
        let mut done: Vec<Done<W>> = (0..=c).map(|_| Done::default()).collect();
        // No tree above the limit, nor above the cheapest whole tree found so far, is of use.
        let mut cap = limit.unwrap_or(f64::INFINITY);
        while let Some(Reverse((bits, id))) = queue.pop() {
            let e = store.entries[id as usize];
            if e.done || e.cost.to_bits() != bits {
                continue; // a cheaper tree of this set was queued later
            }
            store.entries[id as usize].done = true;
            if e.set == self.full {
                return Some(store);
            }
            let a = self.scan(&e);
            let k = e.set.count_ones() as usize;
            for part in &done[1..=c - k] {
                self.join(part, &a, &mut store, &mut queue, &mut cap);
            }
            done[k].push(a, c);
        }
        None
    }

    /// Joins the finished entry `a` with every finished entry of `part` that is disjoint from
    /// it, shares a summed index with it (or meets it at a large enough common neighbour), and
    /// fits the cap; queues each set whose cost that lowers.
    fn join(
        &self,
        part: &Done<W>,
        a: &Scan<W>,
        store: &mut Store<W>,
        queue: &mut BinaryHeap<Reverse<(u64, u32)>>,
        cap: &mut f64,
    ) {
        let builtin = self.d.builtin.is_some();
        let big = &a.e;
        let c = self.ops.len();
        // A built-in step costs at least the size of either operand.
        let budget = *cap - big.cost - if builtin { big.size } else { 0.0 };
        if budget < 0.0 {
            return;
        }
        // Any product with a part larger than all its neighbours outgrows each of them.
        let outer = big.small <= a.widest;
        let reach = big.nbr | if outer { a.hops } else { 0 };
        if part.union & reach == 0 || part.costs.first().is_none_or(|&cost| cost > budget) {
            return;
        }
        // Partners by increasing cost.
        let lim = part.costs.partition_point(|&cost| cost <= budget);
        for w in 0..lim.div_ceil(64) {
            let holds = &part.holds[w * c..(w + 1) * c];
            let word = |set: u128| ones(set).fold(0u64, |acc, t| acc | holds[t]);
            // Connected partners hold a neighbour; outer-product ones a set two hops away;
            // neither may overlap.
            let conn = word(big.nbr);
            let hops = if outer { word(a.hops) } else { 0 };
            let mut cand = (conn | hops) & !word(big.set);
            if lim - 64 * w < 64 {
                cand &= (1u64 << (lim - 64 * w)) - 1;
            }
            while cand != 0 {
                let bit = cand.trailing_zeros() as usize;
                cand &= cand - 1;
                let p = &part.scans[64 * w + bit];
                if p.key > *cap - big.cost {
                    continue;
                }
                let e = &p.e;
                let u = e.ind | big.ind;
                // The step's iteration space (built-in models only: 0 otherwise).
                let space = if builtin { self.d.size(u) } else { 0.0 };
                // Indices a single operand of the step may sum out before it (dp_ways): the
                // step's least iteration space is without them.
                let shrink = if WAYS {
                    self.reducible_own(e) | self.reducible_own(big)
                } else {
                    Bits::EMPTY
                };
                let least = if shrink == Bits::EMPTY || !builtin {
                    space
                } else {
                    self.d.size(u.minus(shrink))
                };
                if conn >> bit & 1 == 0 {
                    if p.e.small > p.widest {
                        continue; // as `outer`, for the partner
                    }
                    // An outer product pays only below a common neighbour's size.
                    let meet = ones(e.nbr & big.nbr)
                        .map(|u| self.leaf_size[u])
                        .fold(0.0, f64::max);
                    let product = if builtin {
                        least
                    } else {
                        self.d.size(u.minus(shrink))
                    };
                    if product > meet {
                        continue;
                    }
                }
                // A built-in step costs at least its iteration space (a reduction first, at
                // least the reduced step's).
                if e.cost + big.cost + least > *cap {
                    continue;
                }
                if let Some((id, cost)) = self.combine(store, e, big, space, *cap) {
                    if store.entries[id as usize].set == self.full {
                        *cap = cost;
                    }
                    queue.push(Reverse((cost.to_bits(), id)));
                }
            }
        }
    }

    /// Records the tree joining `e1` and `e2` if it costs at most `cap` and is the cheapest of
    /// its set so far, returning the set's entry and new cost; `space` is the size of the
    /// step's iteration space (built-in models).
    fn combine(
        &self,
        store: &mut Store<W>,
        e1: &Entry<W>,
        e2: &Entry<W>,
        space: f64,
        cap: f64,
    ) -> Option<(u32, f64)> {
        let net = self.d.net;
        let builtin = self.d.builtin.is_some();
        let s = e1.set | e2.set;
        let base = e1.cost + e2.cost;
        let u = e1.ind | e2.ind;
        // The step sums an index that no operand outside `s` and not the output holds: an index
        // a leaf alone holds, or a shared one that no operand outside holds.
        let mut ind = u.minus(e1.own | e2.own);
        for x in (e1.ind & e2.ind).minus(net.output).ones() {
            if self.holders[x] & !s == 0 {
                ind.remove(x);
            }
        }
        // As `Net::step_cost`, with the step's space (the size tables for built-in models).
        let step = |ka: Bits<W>, kb: Bits<W>, space: f64| match self.d.builtin {
            Some(BuiltinCost::Flops) => space * if ka | kb == ind { 1.0 } else { 2.0 },
            Some(BuiltinCost::MultiplyAdds) => space,
            None => net.step_cost(ka, kb, ind),
        };
        let mut cost = base + step(e1.ind, e2.ind, space);
        let mut how = 0u8;
        if WAYS && (self.reducible_own(e1) != Bits::EMPTY || self.reducible_own(e2) != Bits::EMPTY)
        {
            // Each single operand consumed as it is or reduced first (as `optimal` does).
            let ways = |e: &Entry<W>| [Some((e.ind, 0.0)), self.reduced_of(e)];
            for (i, wa) in ways(e1).iter().enumerate() {
                let Some((ka, ca)) = *wa else { continue };
                for (j, wb) in ways(e2).iter().enumerate() {
                    let Some((kb, cb)) = *wb else { continue };
                    if i + j == 0 {
                        continue; // the step as it is, costed above
                    }
                    let space = if builtin { self.d.size(ka | kb) } else { 0.0 };
                    let total = base + ca + cb + step(ka, kb, space);
                    if total < cost {
                        cost = total;
                        how = (i | j << 1) as u8;
                    }
                }
            }
        }
        if cost > cap {
            return None;
        }
        if let Some(p) = store.table.get(s) {
            let e = &mut store.entries[p as usize];
            if e.done || cost >= e.cost {
                return None;
            }
            e.cost = cost;
            e.left = e1.set;
            e.how = how;
            return Some((p, cost));
        }
        let size = self.d.size(ind);
        if size > net.limit {
            return None;
        }
        let id = store.entries.len() as u32;
        store.table.insert(s, id);
        store.entries.push(Entry {
            set: s,
            ind,
            size,
            cost,
            nbr: (e1.nbr | e2.nbr) & !s,
            left: e1.set,
            own: Bits::EMPTY,
            done: false,
            how,
            small: size,
        });
        Some((id, cost))
    }

    /// Appends the steps of local set `s`'s tree (each single operand's reduction, if its
    /// tree has one, before the step that consumes it); returns its node id.
    fn emit(&self, store: &Store<W>, s: u128, n: usize, path: &mut SsaPath) -> usize {
        if s & (s - 1) == 0 {
            return self.ops[s.trailing_zeros() as usize];
        }
        let id = store.table.get(s).expect("a built set");
        let Entry { left, how, .. } = store.entries[id as usize];
        let mut x = self.emit(store, left, n, path);
        if how & 1 != 0 {
            path.push(vec![x]);
            x = n + path.len() - 1;
        }
        let mut y = self.emit(store, s ^ left, n, path);
        if how & 2 != 0 {
            path.push(vec![y]);
            y = n + path.len() - 1;
        }
        path.push(vec![x, y]);
        n + path.len() - 1
    }

    /// A single operand's reduced form and that step's cost, if it is searched.
    fn reduced_of(&self, e: &Entry<W>) -> Option<(Bits<W>, f64)> {
        if e.set & (e.set - 1) != 0 {
            return None;
        }
        self.d.reduced[self.ops[e.set.trailing_zeros() as usize]]
    }

    /// The own indices of a single operand that may be summed out before its step.
    fn reducible_own(&self, e: &Entry<W>) -> Bits<W> {
        match self.reduced_of(e) {
            Some(_) => e.own,
            None => Bits::EMPTY,
        }
    }
}

/// The dp path, or `None` when it finds none within the memory limit. With `upper`, the cost
/// of a feasible path, no cap rises above it: `None` then also when no tree of this search's
/// space costs at most `upper`.
pub(crate) fn dp<const W: usize>(net: &Net<'_, '_, W>, upper: Option<f64>) -> Option<SsaPath> {
    search::<W, false>(net, upper)
}

/// [`dp`] over a larger space: each single operand with indices of its own is consumed as it is
/// or after a step that sums them out of it, whichever makes the tree cheaper (as `optimal`
/// does). On a connected network this space holds the trees [`dp`] finds on the problem as it
/// is and on the problem with those indices summed out first, so one search replaces the two.
/// With the outer-product rules read at each operand's smaller form, their outer products too.
pub(crate) fn dp_ways<const W: usize>(net: &Net<'_, '_, W>, upper: Option<f64>) -> Option<SsaPath> {
    search::<W, true>(net, upper)
}

/// Whether every operand is joined to every other through shared summed indices (one
/// component, as [`dp`] splits them).
pub(crate) fn connected<const W: usize>(net: &Net<'_, '_, W>) -> bool {
    let n = net.n();
    n <= 1 || component(&neighbours(net, &holders(net)), 0).count_ones() as usize == n
}

/// The operands holding each index.
fn holders<const W: usize>(net: &Net<'_, '_, W>) -> Vec<u128> {
    let mut holders = vec![0u128; net.ext.len()];
    for (t, k) in net.inputs.iter().enumerate() {
        for x in k.ones() {
            holders[x] |= 1u128 << t;
        }
    }
    holders
}

/// The operands sharing a summed index with each operand (`holders` from [`holders`]).
fn neighbours<const W: usize>(net: &Net<'_, '_, W>, holders: &[u128]) -> Vec<u128> {
    (0..net.n())
        .map(|t| {
            net.inputs[t]
                .minus(net.output)
                .ones()
                .fold(0u128, |m, x| m | holders[x])
                & !(1u128 << t)
        })
        .collect()
}

/// The operands joined to `start` through `nbr` (from [`neighbours`]), `start` included.
fn component(nbr: &[u128], start: usize) -> u128 {
    let mut comp = 1u128 << start;
    let mut frontier = comp;
    while frontier != 0 {
        let mut next = 0u128;
        for t in ones(frontier) {
            next |= nbr[t];
        }
        frontier = next & !comp;
        comp |= next;
    }
    comp
}

/// [`dp`] (`WAYS` false) or [`dp_ways`] (true): one function, two compiled searches, so that
/// the plain one carries none of the other's checks.
fn search<const W: usize, const WAYS: bool>(
    net: &Net<'_, '_, W>,
    upper: Option<f64>,
) -> Option<SsaPath> {
    let n = net.n();
    if n <= 1 {
        return Some(SsaPath::new());
    }
    assert!(n <= MAX_OPERANDS, "caller checks the operand count");
    let holders = holders(net);
    let nbr_leaf = neighbours(net, &holders);
    let own: Vec<Bits<W>> = (0..n)
        .map(|t| {
            let mut b = Bits::EMPTY;
            for x in net.inputs[t].minus(net.output).ones() {
                if holders[x] == 1u128 << t {
                    b.insert(x);
                }
            }
            b
        })
        .collect();
    let reduced: Vec<_> = (0..n)
        .map(|t| {
            let r = net.inputs[t].minus(own[t]);
            (WAYS && own[t] != Bits::EMPTY && net.fits(r))
                .then(|| (r, net.nary_cost(&[net.inputs[t]], r)))
        })
        .collect();
    let d: Dp<'_, '_, '_, W, WAYS> = Dp {
        net,
        builtin: net.builtin(),
        sizes: Sizes::new(net),
        nbr_leaf,
        own,
        reduced,
    };
    // Connected components, in order of their lowest operand.
    let mut seen = 0u128;
    let mut parts: Vec<(usize, Bits<W>)> = Vec::new();
    let mut path = SsaPath::new();
    // Slack so that rounding in another summation order never prunes the bound's own tree.
    let limit = upper.map(|u| u * (1.0 + 1e-9) + 1e-9);
    for start in 0..n {
        if seen >> start & 1 == 1 {
            continue;
        }
        let comp = component(&d.nbr_leaf, start);
        seen |= comp;
        let part = if comp.count_ones() == 1 {
            (start, net.inputs[start])
        } else {
            let c = Comp::new(&d, comp);
            let store = c.solve(limit)?;
            let top = store.table.get(c.full).expect("the whole component");
            let ind = store.entries[top as usize].ind;
            (c.emit(&store, c.full, n, &mut path), ind)
        };
        parts.push(part);
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
        path.push(vec![ia.min(ib), ia.max(ib)]);
        parts.push((n + path.len() - 1, k12));
    }
    Some(path)
}

#[cfg(test)]
#[path = "dp_reference.rs"]
mod reference;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{CostModel, Flops, MultiplyAdds, StepShape};
    use crate::net::Problem;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// opt_einsum's FLOPs through [`StepShape`] only, so the searches take the custom-model path.
    struct SlowFlops;
    impl CostModel for SlowFlops {
        fn name(&self) -> &str {
            "slow-flops"
        }
        fn step_cost(&self, step: &StepShape<'_>) -> f64 {
            let summed = step.sums();
            step.size_of(&step.indices()) * if summed { 2.0 } else { 1.0 }
        }
    }

    const LETTERS: &[char] = &['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l'];

    /// A random network: `ops` operands of 1..=4 indices over `letters` letters, extents 1..=7,
    /// a random subset of the used letters as output.
    #[derive(Debug, Clone)]
    struct Case {
        inputs: Vec<Vec<char>>,
        output: Vec<char>,
        extents: BTreeMap<char, usize>,
    }

    fn arb_case(
        ops: std::ops::RangeInclusive<usize>,
        letters: usize,
    ) -> impl Strategy<Value = Case> {
        (
            prop::collection::vec(prop::collection::btree_set(0..letters, 1..=4), ops),
            prop::collection::vec(1..=7usize, letters),
            any::<u16>(),
        )
            .prop_map(move |(ops, ext, outmask)| {
                let inputs: Vec<Vec<char>> = ops
                    .iter()
                    .map(|t| t.iter().map(|&i| LETTERS[i]).collect())
                    .collect();
                let used: std::collections::BTreeSet<usize> =
                    ops.iter().flatten().copied().collect();
                let output = used
                    .iter()
                    .filter(|&&i| outmask >> i & 1 == 1)
                    .map(|&i| LETTERS[i])
                    .collect();
                let extents = LETTERS.iter().copied().zip(ext).collect();
                Case {
                    inputs,
                    output,
                    extents,
                }
            })
    }

    fn cost_of(net: &Net<'_, '_, 1>, path: &Option<SsaPath>) -> Option<f64> {
        Some(
            net.path_cost(path.as_ref()?)
                .expect("a dp path replays within the limit"),
        )
    }

    /// The reference search's pairs as an SSA path.
    fn ssa(path: Option<crate::strategy::PairPath>) -> Option<SsaPath> {
        Some(path?.iter().map(|&(a, b)| vec![a, b]).collect())
    }

    /// The new and the reference search agree in cost (and in finding a path) on `c` under
    /// `model`, `limit` and the bound `upper`.
    fn agree(c: &Case, model: &dyn CostModel, limit: Option<u128>, upper: Option<f64>) {
        let p = Problem::new(c.inputs.clone(), c.output.clone(), &c.extents, limit, model);
        let net = Net::<1>::new(&p);
        let new = cost_of(&net, &dp(&net, upper));
        let old = cost_of(&net, &ssa(reference::dp(&net, upper)));
        assert_eq!(new, old, "{c:?} limit {limit:?} upper {upper:?}");
    }

    /// The cheapest tree of the space the module documents, over all subsets of a connected
    /// network by brute force: `None` if none fits the limit.
    fn space_optimum(net: &Net<'_, '_, 1>) -> Option<f64> {
        let n = net.n();
        let full = (1usize << n) - 1;
        let holders = |x: usize| (0..n).filter(move |&t| net.inputs[t].0[0] >> x & 1 == 1);
        let union = |s: usize| {
            (0..n)
                .filter(|t| s >> t & 1 == 1)
                .fold(Bits::<1>::EMPTY, |b, t| b | net.inputs[t])
        };
        // Operands outside `s` sharing a summed index with it.
        let nbr = |s: usize| {
            let mut m = 0usize;
            for x in union(s).minus(net.output).ones() {
                for t in holders(x) {
                    m |= 1 << t;
                }
            }
            m & !s
        };
        let ind = |s: usize| {
            if s.count_ones() == 1 {
                net.inputs[s.trailing_zeros() as usize]
            } else {
                union(s) & (net.output | union(full ^ s))
            }
        };
        let leaf_size = |t: usize| net.size(net.inputs[t]);
        let mut best = vec![f64::INFINITY; full + 1];
        for t in 0..n {
            best[1 << t] = 0.0;
        }
        for s in 1..=full {
            if s.count_ones() < 2 || !net.fits(ind(s)) {
                continue;
            }
            let mut a = (s - 1) & s;
            while a > 0 {
                let b = s ^ a;
                if a < b && best[a].is_finite() && best[b].is_finite() {
                    let joined = nbr(a) & b != 0 || {
                        let meet = (0..n)
                            .filter(|u| (nbr(a) & nbr(b)) >> u & 1 == 1)
                            .map(leaf_size)
                            .fold(0.0, f64::max);
                        net.size(ind(a) | ind(b)) <= meet
                    };
                    if joined {
                        let c = best[a] + best[b] + net.step_cost(ind(a), ind(b), ind(s));
                        best[s] = best[s].min(c);
                    }
                }
                a = (a - 1) & s;
            }
        }
        best[full].is_finite().then_some(best[full])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        #[test]
        fn same_cost_as_the_reference(
            c in arb_case(2..=11, 12),
            model in 0..3usize,
            limit in prop::option::weighted(0.3, 1u128..=400),
            scale in prop::option::weighted(0.5, 0.3f64..1.5),
        ) {
            let models: [&dyn CostModel; 3] = [&Flops, &MultiplyAdds, &SlowFlops];
            let m = models[model];
            // A bound near the unbounded answer, so that both finding and missing occur.
            let p = Problem::new(c.inputs.clone(), c.output.clone(), &c.extents, limit, m);
            let net = Net::<1>::new(&p);
            let free = cost_of(&net, &ssa(reference::dp(&net, None)));
            let upper = scale.zip(free).map(|(k, f)| (f * k).round());
            agree(&c, m, limit, upper);
            agree(&c, m, limit, None);
        }

        #[test]
        fn optimal_over_its_space_on_connected_networks(
            c in arb_case(2..=8, 6),
            bonds in prop::collection::vec(1..=4usize, 7),
            limit in prop::option::weighted(0.3, 1u128..=300),
        ) {
            // Connected: a summed bond index between each operand and the next.
            let mut c = c;
            for (i, &extent) in bonds.iter().enumerate().take(c.inputs.len() - 1) {
                let bond = char::from(b'M' + i as u8);
                c.inputs[i].push(bond);
                c.inputs[i + 1].push(bond);
                c.extents.insert(bond, extent);
            }
            let p = Problem::new(c.inputs.clone(), c.output.clone(), &c.extents, limit, &Flops);
            let net = Net::<1>::new(&p);
            prop_assert_eq!(cost_of(&net, &dp(&net, None)), space_optimum(&net));
        }
    }

    /// Larger networks than the proptests reach, through the hash-map table (components of
    /// more than `FLAT_MAX` operands): rings and grids of 17 to 24 matrices.
    #[test]
    fn same_cost_as_the_reference_beyond_the_flat_table() {
        for n in [17usize, 20, 24] {
            let letter = |i: usize| char::from_u32(0x100 + i as u32).expect("a char");
            let ring = Case {
                inputs: (0..n)
                    .map(|i| vec![letter(i), letter((i + 1) % n)])
                    .collect(),
                output: vec![],
                extents: (0..n).map(|i| (letter(i), 2 + i % 5)).collect(),
            };
            agree(&ring, &Flops, None, None);
            let mut ladder = ring.clone();
            for i in (0..n).step_by(4) {
                let rung = letter(n + i);
                ladder.inputs[i].push(rung);
                ladder.inputs[(i + n / 2) % n].push(rung);
                ladder.extents.insert(rung, 3);
            }
            agree(&ladder, &Flops, None, None);
        }
    }
}
