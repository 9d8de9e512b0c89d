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
//! so a component of up to [`FLAT_MAX`] operands finds its subsets in a flat table, one of up
//! to 128 keeps its sets in a `u128`, and a larger one (up to [`MAX_COMPONENT`] operands) in
//! the narrowest [`Bits`] that holds it; the network as a whole has no operand limit.

use super::SsaPath;
use crate::bits::Bits;
use crate::bits::FastMap;
use crate::bits::OpSet;
use crate::net::Net;
use crate::BuiltinCost;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Most operands of one connected component (its operand sets are bit sets of at most 16
/// words; the subsets such a component builds already outnumber what a search can visit).
pub(crate) const MAX_COMPONENT: usize = 1024;

/// Smallest component whose operand sets are [`Bits`] rather than a `u128`.
const WIDE_FROM: usize = 129;

/// Largest set whose operands' bit words rule out overlapping partners (see `join`).
const FEW_OPERANDS: usize = 16;

/// Largest component whose subsets are looked up in a flat table of 2^n slots (64K x 4 bytes);
/// larger ones use a hash map.
const FLAT_MAX: usize = 16;

/// A built set of a component, its result and its cheapest tree so far.
#[derive(Clone, Copy)]
struct Entry<const W: usize, S> {
    /// Operands, in the component's numbering.
    set: S,
    /// Result indices.
    ind: Bits<W>,
    /// Elements of the result.
    size: f64,
    /// Cost of the cheapest tree found.
    cost: f64,
    /// Operands outside `set` that share a summed index with it.
    nbr: S,
    /// The first part of that tree's last step (empty for a single operand).
    left: S,
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
struct Scan<const W: usize, S> {
    /// `cost + size` with a built-in model (a step costs at least either operand's size),
    /// else `cost`: the least a tree using this entry costs.
    key: f64,
    e: Entry<W, S>,
    /// Largest operand among the neighbours (an outer product with this entry can pay only
    /// if its result is no larger than a common neighbour).
    widest: f64,
    /// Operands two hops away (neighbours of neighbours, outside the set and its neighbours).
    hops: S,
}

/// The finished entries over sets of one size, in the order they finished (by cost).
struct Done<const W: usize, S> {
    scans: Vec<Scan<W, S>>,
    /// `scans[i].e.cost`, apart: the partner scan's binary search over them read a whole
    /// entry per probe and took a sixth of the search's time.
    costs: Vec<f64>,
    /// Operands held by any of `scans`: most expansions find no partner in most sizes, and
    /// this settles it before the scan.
    union: S,
    /// `holds[w * c + t]` bit `i`: `scans[64 w + i]` holds operand `t` (of the `c`); so the
    /// partners of a set are found a word of 64 entries at a time, without reading those that
    /// overlap.
    holds: Vec<u64>,
}

impl<const W: usize, S: OpSet> Done<W, S> {
    fn new() -> Self {
        Done {
            scans: Vec::new(),
            costs: Vec::new(),
            union: S::EMPTY,
            holds: Vec::new(),
        }
    }

    fn push(&mut self, scan: Scan<W, S>, c: usize) {
        let i = self.scans.len();
        if self.holds.len() < (i / 64 + 1) * c {
            // A new word of 64 entries for each operand.
            self.holds.resize((i / 64 + 1) * c, 0);
            self.scans.reserve(64);
        }
        for t in scan.e.set.ones() {
            self.holds[(i / 64) * c + t] |= 1u64 << (i % 64);
        }
        self.costs.push(scan.e.cost);
        self.union = self.union | scan.e.set;
        self.scans.push(scan);
    }
}

/// Where a component's entries are found by set.
enum Table<S> {
    /// Indexed by the set itself (components of up to [`FLAT_MAX`] operands): the entry id
    /// plus one, 0 for none (so the table starts as zeroed memory).
    Flat(Vec<u32>),
    Map(FastMap<S, u32>),
}

impl<S: OpSet> Table<S> {
    fn new(c: usize) -> Self {
        if c <= FLAT_MAX {
            Table::Flat(vec![0; 1 << c])
        } else {
            Table::Map(FastMap::default())
        }
    }

    fn get(&self, s: S) -> Option<u32> {
        match self {
            Table::Flat(v) => v[s.low_word()].checked_sub(1),
            Table::Map(m) => m.get(&s).copied(),
        }
    }

    fn insert(&mut self, s: S, id: u32) {
        match self {
            Table::Flat(v) => v[s.low_word()] = id + 1,
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

/// Lists of operands, one per key, in one allocation (compressed rows): the network-wide
/// relations, with no bound on the operand count.
struct Rows {
    /// Row `k` is `items[start[k]..start[k + 1]]`.
    start: Vec<usize>,
    items: Vec<usize>,
}

impl Rows {
    /// The rows of `keys` keys that `each` lists: it calls its argument with `(key, item)`
    /// for every item (twice, the same calls each time: once to count, once to fill), each
    /// row in call order.
    fn new(keys: usize, mut each: impl FnMut(&mut dyn FnMut(usize, usize))) -> Self {
        let mut start = vec![0; keys + 1];
        each(&mut |k, _| start[k + 1] += 1);
        for k in 0..keys {
            start[k + 1] += start[k];
        }
        let mut items = vec![0; start[keys]];
        // Filled through `start[k]` as the next free slot of row `k`, then shifted back.
        each(&mut |k, x| {
            items[start[k]] = x;
            start[k] += 1;
        });
        start.copy_within(0..keys, 1);
        start[0] = 0;
        Rows { start, items }
    }

    fn row(&self, k: usize) -> &[usize] {
        &self.items[self.start[k]..self.start[k + 1]]
    }
}

/// The network's operands as a graph: which operands hold each summed (non-output) index, and
/// which share one (neighbours). Two forms: [`Masks`] up to 128 operands, [`Lists`] for any.
trait Graph: Sized {
    /// The graph of `net`.
    fn of<const W: usize>(net: &Net<'_, '_, W>) -> Self;
    /// Whether operand `t` alone holds summed index `x`.
    fn sole(&self, x: usize, t: usize) -> bool;
    /// Calls `f` on each neighbour of operand `t`.
    fn each_neighbour(&self, t: usize, f: impl FnMut(usize));
    /// The connected components: the operands of each in increasing order, the components in
    /// order of their lowest operand, as rows.
    fn components(&self) -> Rows;
}

/// A [`Graph`] of at most 128 operands as bit masks (a small search's set-up takes a few
/// thousand instructions fewer than through lists).
struct Masks {
    holders: Vec<u128>,
    nbr: Vec<u128>,
}

impl Graph for Masks {
    fn of<const W: usize>(net: &Net<'_, '_, W>) -> Self {
        let mut holders = vec![0u128; net.ext.len()];
        for (t, k) in net.inputs.iter().enumerate() {
            for x in k.minus(net.output).ones() {
                holders[x] |= 1u128 << t;
            }
        }
        let nbr = (0..net.n())
            .map(|t| {
                net.inputs[t]
                    .minus(net.output)
                    .ones()
                    .fold(0u128, |m, x| m | holders[x])
                    & !(1u128 << t)
            })
            .collect();
        Masks { holders, nbr }
    }

    fn sole(&self, x: usize, t: usize) -> bool {
        self.holders[x] == 1u128 << t
    }

    fn each_neighbour(&self, t: usize, f: impl FnMut(usize)) {
        self.nbr[t].ones().for_each(f);
    }

    fn components(&self) -> Rows {
        let n = self.nbr.len();
        let mut seen = 0u128;
        let mut rows = Rows {
            start: vec![0],
            items: Vec::with_capacity(n),
        };
        for first in 0..n {
            if seen >> first & 1 == 1 {
                continue;
            }
            let mut comp = 1u128 << first;
            let mut frontier = comp;
            while frontier != 0 {
                let next = frontier.ones().fold(0u128, |m, t| m | self.nbr[t]);
                frontier = next & !comp;
                comp |= next;
            }
            seen |= comp;
            rows.items.extend(comp.ones());
            rows.start.push(rows.items.len());
        }
        rows
    }
}

/// A [`Graph`] of any number of operands as lists.
struct Lists {
    /// The operands holding each summed index, by index id.
    holders: Rows,
    /// The neighbours of each operand.
    nbr: Rows,
}

impl Graph for Lists {
    fn of<const W: usize>(net: &Net<'_, '_, W>) -> Self {
        let holders = Rows::new(net.ext.len(), |f| {
            for (t, k) in net.inputs.iter().enumerate() {
                for x in k.minus(net.output).ones() {
                    f(x, t);
                }
            }
        });
        // Each neighbour once: `mark[u]` is the last operand that listed `u`, plus one.
        let mut mark = vec![0; net.n()];
        let nbr = Rows::new(net.n(), |f| {
            mark.fill(0);
            for (t, k) in net.inputs.iter().enumerate() {
                mark[t] = t + 1;
                for x in k.minus(net.output).ones() {
                    for &u in holders.row(x) {
                        if mark[u] != t + 1 {
                            mark[u] = t + 1;
                            f(t, u);
                        }
                    }
                }
            }
        });
        Lists { holders, nbr }
    }

    fn sole(&self, x: usize, t: usize) -> bool {
        self.holders.row(x) == [t]
    }

    fn each_neighbour(&self, t: usize, f: impl FnMut(usize)) {
        self.nbr.row(t).iter().copied().for_each(f);
    }

    fn components(&self) -> Rows {
        let n = self.nbr.start.len() - 1;
        // Operands by component (a breadth-first search from each unseen one).
        let mut seen = vec![false; n];
        let mut rows = Rows {
            start: vec![0],
            items: Vec::with_capacity(n),
        };
        for first in 0..n {
            if seen[first] {
                continue;
            }
            seen[first] = true;
            let from = rows.items.len();
            rows.items.push(first);
            let mut i = from;
            while i < rows.items.len() {
                for &u in self.nbr.row(rows.items[i]) {
                    if !seen[u] {
                        seen[u] = true;
                        rows.items.push(u);
                    }
                }
                i += 1;
            }
            rows.items[from..].sort_unstable();
            rows.start.push(rows.items.len());
        }
        rows
    }
}

/// The connected components of `net`'s operands, as [`Graph::components`].
fn components<const W: usize>(net: &Net<'_, '_, W>) -> Rows {
    if net.n() <= 128 {
        Masks::of(net).components()
    } else {
        Lists::of(net).components()
    }
}

/// What the whole network shares: its net, each operand's own indices and reduced form.
struct Dp<'n, 'p, 'a, const W: usize, const WAYS: bool> {
    net: &'n Net<'p, 'a, W>,
    builtin: Option<BuiltinCost>,
    sizes: Sizes,
    /// Per operand, its non-output indices that no other operand holds (summed by its first
    /// step, which is the only step they can be candidates of while in no other operand).
    own: Vec<Bits<W>>,
    /// Per operand, when single-operand reductions are searched ([`dp_ways`]) and it has own
    /// indices: its indices after summing them out, and that step's cost.
    reduced: Vec<Option<(Bits<W>, f64)>>,
}

/// One connected component being solved, in its own numbering of operands, with its operand
/// sets of type `S` (which holds at least its operand count).
struct Comp<'d, 'n, 'p, 'a, const W: usize, const WAYS: bool, S> {
    d: &'d Dp<'n, 'p, 'a, W, WAYS>,
    /// Global operand of each local one.
    ops: &'d [usize],
    /// All local operands.
    full: S,
    /// Local neighbours and sizes of each local operand.
    nbr: Vec<S>,
    leaf_size: Vec<f64>,
    /// Local holders of each summed index of the component (empty for the other ids).
    holders: Vec<S>,
}

/// The entries found so far and where each set's entry is.
struct Store<const W: usize, S> {
    entries: Vec<Entry<W, S>>,
    table: Table<S>,
}

impl<const W: usize, const WAYS: bool> Dp<'_, '_, '_, W, WAYS> {
    fn size(&self, s: Bits<W>) -> f64 {
        self.sizes.size(self.net, s)
    }
}

impl<'d, 'n, 'p, 'a, const W: usize, const WAYS: bool, S: OpSet> Comp<'d, 'n, 'p, 'a, W, WAYS, S> {
    /// The component of global operands `ops` (increasing) of the network's graph `g`.
    fn new(d: &'d Dp<'n, 'p, 'a, W, WAYS>, ops: &'d [usize], g: &impl Graph) -> Self {
        let c = ops.len();
        debug_assert!(c <= S::CAPACITY);
        // Local number of each global operand of the component.
        let mut local = vec![usize::MAX; d.net.n()];
        for (i, &t) in ops.iter().enumerate() {
            local[t] = i;
        }
        let mut holders = vec![S::EMPTY; d.net.ext.len()];
        for (i, &t) in ops.iter().enumerate() {
            for x in d.net.inputs[t].minus(d.net.output).ones() {
                holders[x] = holders[x] | S::single(i);
            }
        }
        Comp {
            d,
            full: S::first(c),
            nbr: ops
                .iter()
                .map(|&t| {
                    let mut m = S::EMPTY;
                    g.each_neighbour(t, |u| m = m | S::single(local[u]));
                    m
                })
                .collect(),
            leaf_size: ops.iter().map(|&t| d.size(d.net.inputs[t])).collect(),
            holders,
            ops,
        }
    }

    /// An entry as the partner scans read it.
    fn scan(&self, e: &Entry<W, S>) -> Scan<W, S> {
        let mut widest = 0.0;
        let mut hops = S::EMPTY;
        for u in e.nbr.ones() {
            widest = f64::max(widest, self.leaf_size[u]);
            hops = hops | self.nbr[u];
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
    fn solve(&self, limit: Option<f64>) -> Option<Store<W, S>> {
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
                set: S::single(i),
                ind: self.d.net.inputs[t],
                size: self.leaf_size[i],
                cost: 0.0,
                nbr: self.nbr[i],
                left: S::EMPTY,
                own: self.d.own[t],
                done: false,
                how: 0,
                small: self.d.reduced[t].map_or(self.leaf_size[i], |(r, _)| self.d.size(r)),
            });
            store.table.insert(S::single(i), id);
            queue.push(Reverse((0.0f64.to_bits(), id)));
        }
        let mut done: Vec<Done<W, S>> = (0..=c).map(|_| Done::new()).collect();
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
            let k = e.set.len();
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
        part: &Done<W, S>,
        a: &Scan<W, S>,
        store: &mut Store<W, S>,
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
        let reach = big.nbr | if outer { a.hops } else { S::EMPTY };
        if (part.union & reach).is_empty() || part.costs.first().is_none_or(|&cost| cost > budget) {
            return;
        }
        // Partners by increasing cost.
        let lim = part.costs.partition_point(|&cost| cost <= budget);
        // Overlapping partners are ruled out a word at a time from the set's operands when it
        // has few, else one candidate at a time (on a ring of 200 operands, reading a large
        // set's operands for each word took minutes).
        let few = big.set.len() <= FEW_OPERANDS;
        for w in 0..lim.div_ceil(64) {
            let holds = &part.holds[w * c..(w + 1) * c];
            let word = |set: S| set.ones().fold(0u64, |acc, t| acc | holds[t]);
            // Connected partners hold a neighbour; outer-product ones a set two hops away;
            // neither may overlap.
            let conn = word(big.nbr);
            let hops = if outer { word(a.hops) } else { 0 };
            let mut cand = conn | hops;
            if few {
                cand &= !word(big.set);
            }
            if lim - 64 * w < 64 {
                cand &= (1u64 << (lim - 64 * w)) - 1;
            }
            while cand != 0 {
                let bit = cand.trailing_zeros() as usize;
                cand &= cand - 1;
                let p = &part.scans[64 * w + bit];
                if p.key > *cap - big.cost || !few && !(p.e.set & big.set).is_empty() {
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
                    let meet = (e.nbr & big.nbr)
                        .ones()
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
        store: &mut Store<W, S>,
        e1: &Entry<W, S>,
        e2: &Entry<W, S>,
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
            if (self.holders[x] & !s).is_empty() {
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
            let ways = |e: &Entry<W, S>| [Some((e.ind, 0.0)), self.reduced_of(e)];
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
    fn emit(&self, store: &Store<W, S>, s: S, n: usize, path: &mut SsaPath) -> usize {
        if s.is_single() {
            return self.ops[s.lowest()];
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
    fn reduced_of(&self, e: &Entry<W, S>) -> Option<(Bits<W>, f64)> {
        if !e.set.is_single() {
            return None;
        }
        self.d.reduced[self.ops[e.set.lowest()]]
    }

    /// The own indices of a single operand that may be summed out before its step.
    fn reducible_own(&self, e: &Entry<W, S>) -> Bits<W> {
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
    search::<W, false>(net, upper, WIDE_FROM)
}

/// [`dp`] over a larger space: each single operand with indices of its own is consumed as it is
/// or after a step that sums them out of it, whichever makes the tree cheaper (as `optimal`
/// does). On a connected network this space holds the trees [`dp`] finds on the problem as it
/// is and on the problem with those indices summed out first, so one search replaces the two.
/// With the outer-product rules read at each operand's smaller form, their outer products too.
pub(crate) fn dp_ways<const W: usize>(net: &Net<'_, '_, W>, upper: Option<f64>) -> Option<SsaPath> {
    search::<W, true>(net, upper, WIDE_FROM)
}

/// Whether every operand is joined to every other through shared summed indices (one
/// component, as [`dp`] splits them).
pub(crate) fn connected<const W: usize>(net: &Net<'_, '_, W>) -> bool {
    net.n() <= 1 || components(net).start.len() == 2
}

/// The operand count of the network's largest connected component (what [`dp`] and
/// [`dp_ways`] take at most [`MAX_COMPONENT`] of).
pub(crate) fn largest_component<const W: usize>(net: &Net<'_, '_, W>) -> usize {
    components(net)
        .start
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0)
}

/// [`dp`] (`WAYS` false) or [`dp_ways`] (true): one function, two compiled searches, so that
/// the plain one carries none of the other's checks. Components of `wide_from` operands or
/// more keep their sets in [`Bits`] ([`WIDE_FROM`]; the tests lower it to check one type
/// against the other).
fn search<const W: usize, const WAYS: bool>(
    net: &Net<'_, '_, W>,
    upper: Option<f64>,
    wide_from: usize,
) -> Option<SsaPath> {
    match net.n() {
        0 | 1 => Some(SsaPath::new()),
        2..=128 => search_on::<W, WAYS, Masks>(net, upper, wide_from),
        _ => search_on::<W, WAYS, Lists>(net, upper, wide_from),
    }
}

/// [`search`] through the graph form `G`.
fn search_on<const W: usize, const WAYS: bool, G: Graph>(
    net: &Net<'_, '_, W>,
    upper: Option<f64>,
    wide_from: usize,
) -> Option<SsaPath> {
    let n = net.n();
    let graph = G::of(net);
    let comps = graph.components();
    let count = comps.start.len() - 1;
    assert!(
        (0..count).all(|k| comps.row(k).len() <= MAX_COMPONENT),
        "caller checks the component sizes"
    );
    let own: Vec<Bits<W>> = (0..n)
        .map(|t| {
            let mut b = Bits::EMPTY;
            for x in net.inputs[t].minus(net.output).ones() {
                if graph.sole(x, t) {
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
        own,
        reduced,
    };
    let mut parts: Vec<(usize, Bits<W>)> = Vec::new();
    let mut path = SsaPath::new();
    // Slack so that rounding in another summation order never prunes the bound's own tree.
    let limit = upper.map(|u| u * (1.0 + 1e-9) + 1e-9);
    for ops in (0..count).map(|k| comps.row(k)) {
        let c = ops.len();
        // The narrowest operand set that holds the component.
        let part = if c == 1 {
            (ops[0], net.inputs[ops[0]])
        } else if c < wide_from.min(129) {
            solve_component::<W, WAYS, u128>(&d, ops, &graph, limit, &mut path)?
        } else if c <= 256 {
            solve_component::<W, WAYS, Bits<4>>(&d, ops, &graph, limit, &mut path)?
        } else if c <= 512 {
            solve_component::<W, WAYS, Bits<8>>(&d, ops, &graph, limit, &mut path)?
        } else {
            solve_component::<W, WAYS, Bits<16>>(&d, ops, &graph, limit, &mut path)?
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

/// Solves the component of global operands `ops` (at least two, at most `S::CAPACITY`),
/// appending its steps to `path`: its result's node id and indices, or `None` when it has no
/// tree within `limit` and the memory limit.
fn solve_component<const W: usize, const WAYS: bool, S: OpSet>(
    d: &Dp<'_, '_, '_, W, WAYS>,
    ops: &[usize],
    graph: &impl Graph,
    limit: Option<f64>,
    path: &mut SsaPath,
) -> Option<(usize, Bits<W>)> {
    let c = Comp::<W, WAYS, S>::new(d, ops, graph);
    let store = c.solve(limit)?;
    let top = store.table.get(c.full).expect("the whole component");
    let ind = store.entries[top as usize].ind;
    Some((c.emit(&store, c.full, d.net.n(), path), ind))
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

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Components kept in [`Bits`] (as those of more than 128 operands are) give the very
        /// paths of the `u128` sets, and the graph as [`Lists`] those of [`Masks`], with and
        /// without single-operand reductions and bounds.
        #[test]
        fn wide_operand_sets_find_the_same_paths(
            c in arb_case(2..=11, 12),
            limit in prop::option::weighted(0.3, 1u128..=400),
            scale in prop::option::weighted(0.5, 0.3f64..1.5),
        ) {
            let p = Problem::new(c.inputs.clone(), c.output.clone(), &c.extents, limit, &Flops);
            let net = Net::<1>::new(&p);
            let free = cost_of(&net, &dp(&net, None));
            let upper = scale.zip(free).map(|(k, f)| (f * k).round());
            for u in [None, upper] {
                prop_assert_eq!(search::<1, false>(&net, u, 2), dp(&net, u));
                prop_assert_eq!(search::<1, true>(&net, u, 2), dp_ways(&net, u));
                // And with the network's graph as lists (as beyond 128 operands).
                prop_assert_eq!(search_on::<1, false, Lists>(&net, u, 2), dp(&net, u));
                prop_assert_eq!(search_on::<1, true, Lists>(&net, u, WIDE_FROM), dp_ways(&net, u));
            }
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
            // And through wide operand sets, to the same paths.
            for case in [&ring, &ladder] {
                let p = Problem::new(
                    case.inputs.clone(),
                    case.output.clone(),
                    &case.extents,
                    None,
                    &Flops,
                );
                let net = Net::<1>::new(&p);
                assert_eq!(search::<1, false>(&net, None, 2), dp(&net, None));
            }
        }
    }
}
