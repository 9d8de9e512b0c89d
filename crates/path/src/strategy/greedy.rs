//! opt_einsum's greedy heuristic: Hadamard merges first, then the connected pair with the
//! smallest `size(out) - size(a) - size(b)`, then outer products smallest first.

use super::PairPath;
use crate::bits::Bits;
use crate::bits::FastMap;
use crate::net::Net;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A candidate pair; ordered by (cost, larger id, smaller id) as opt_einsum breaks ties.
struct Cand<const W: usize> {
    cost: f64,
    id2: usize,
    id1: usize,
    k1: Bits<W>,
    k2: Bits<W>,
    k12: Bits<W>,
}

impl<const W: usize> Cand<W> {
    fn key(&self) -> (f64, usize, usize) {
        (self.cost, self.id2, self.id1)
    }
}

impl<const W: usize> PartialEq for Cand<W> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<const W: usize> Eq for Cand<W> {}
impl<const W: usize> PartialOrd for Cand<W> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<const W: usize> Ord for Cand<W> {
    fn cmp(&self, o: &Self) -> Ordering {
        let (a, b) = (self.key(), o.key());
        a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
    }
}

struct State<'n, 'p, 'a, const W: usize> {
    net: &'n Net<'p, 'a, W>,
    output: Bits<W>,
    remaining: FastMap<Bits<W>, usize>,
    /// Size of every SSA id ever created (a key's size never changes, so no map is needed).
    sizes: Vec<f64>,
    /// The live ids holding each non-output index, as bit rows over the ids (ids stay below
    /// 2n, so `words` words a row): one allocation, where a list per index was allocated,
    /// grown, filtered and sorted step by step.
    holders: Vec<u64>,
    words: usize,
    rc2: Bits<W>,
    rc3: Bits<W>,
}

impl<const W: usize> State<'_, '_, '_, W> {
    /// The candidate of live ids `id1`, `id2` (whose keys are `k1`, `k2`).
    fn candidate(&self, id1: usize, k1: Bits<W>, id2: usize, k2: Bits<W>) -> Cand<W> {
        let either = k1 | k2;
        let two = k1 & k2;
        let one = either.minus(two);
        let k12 = (either & self.output) | (two & self.rc3) | (one & self.rc2);
        let cost = self.net.size(k12) - self.sizes[id1] - self.sizes[id2];
        let (mut id1, mut id2) = (id1, id2);
        let (mut k1, mut k2) = (k1, k2);
        if id1 > id2 {
            std::mem::swap(&mut id1, &mut id2);
            std::mem::swap(&mut k1, &mut k2);
        }
        Cand {
            cost,
            id2,
            id1,
            k1,
            k2,
            k12,
        }
    }

    /// Queues the best candidate of live id `id1` with any of the live ids `others`.
    fn push_best(
        &self,
        id1: usize,
        keys: &[Bits<W>],
        others: &[usize],
        queue: &mut BinaryHeap<Reverse<Cand<W>>>,
    ) {
        let k1 = keys[id1];
        if let Some(best) = others
            .iter()
            .map(|&id2| self.candidate(id1, k1, id2, keys[id2]))
            .min()
        {
            queue.push(Reverse(best));
        }
    }

    fn row(&self, d: usize) -> &[u64] {
        &self.holders[d * self.words..(d + 1) * self.words]
    }

    fn set(&mut self, d: usize, id: usize, on: bool) {
        let w = &mut self.holders[d * self.words + id / 64];
        if on {
            *w |= 1 << (id % 64);
        } else {
            *w &= !(1 << (id % 64));
        }
    }

    fn update_ref_counts(&mut self, dims: Bits<W>) {
        for d in dims.ones() {
            let count: u32 = self.row(d).iter().map(|w| w.count_ones()).sum();
            let mut only = Bits::<W>::EMPTY;
            only.insert(d);
            self.rc2 = self.rc2.minus(only);
            self.rc3 = self.rc3.minus(only);
            if count >= 2 {
                self.rc2 = self.rc2 | only;
            }
            if count >= 3 {
                self.rc3 = self.rc3 | only;
            }
        }
    }
}

impl<'n, 'p, 'a, const W: usize> State<'n, 'p, 'a, W> {
    /// The state before the first step: the inputs live (an input with the same index set as
    /// an earlier one joined to it by a Hadamard product at once, pushed onto `path`), the bit
    /// rows and reference counts set; with the index set of every id and the next free id.
    fn seed(
        net: &'n Net<'p, 'a, W>,
        output: Bits<W>,
        path: &mut PairPath,
    ) -> (Self, Vec<Bits<W>>, usize) {
        let n = net.n();
        let mut st = State {
            net,
            output,
            remaining: FastMap::default(),
            sizes: Vec::with_capacity(2 * n),
            holders: vec![0; net.ext.len() * (2 * n).div_ceil(64)],
            words: (2 * n).div_ceil(64),
            rc2: Bits::EMPTY,
            rc3: Bits::EMPTY,
        };
        let mut next_id = n;
        // Index set of every SSA id ever created.
        let mut keys: Vec<Bits<W>> = Vec::with_capacity(2 * n);
        keys.extend_from_slice(&net.inputs);
        st.sizes.extend(net.inputs.iter().map(|k| net.size(*k)));
        // Insertion order of the live keys, for deterministic iteration.
        let mut order: Vec<Bits<W>> = Vec::new();
        for (id, key) in net.inputs.iter().enumerate() {
            if let Some(&old) = st.remaining.get(key) {
                path.push((old, id));
                st.remaining.insert(*key, next_id);
                keys.push(*key);
                st.sizes.push(st.sizes[id]);
                next_id += 1;
            } else {
                st.remaining.insert(*key, id);
                order.push(*key);
            }
        }
        for key in &order {
            let id = st.remaining[key];
            for d in key.minus(output).ones() {
                st.set(d, id, true);
            }
        }
        let all: Bits<W> = (0..net.ext.len()).fold(Bits::EMPTY, |mut b, i| {
            b.insert(i);
            b
        });
        st.update_ref_counts(all.minus(output));
        (st, keys, next_id)
    }
}

/// The greedy path (no memory limit: the caller routes limited searches to branch-1).
pub(crate) fn greedy<const W: usize>(net: &Net<'_, '_, W>) -> PairPath {
    let n = net.n();
    let mut path = PairPath::new();
    if n <= 1 {
        return path;
    }
    // An index every operand has can only go at the last step, so treat it as output.
    let common = net.inputs.iter().fold(!Bits::<W>::EMPTY, |a, b| a & *b);
    let output = net.output | common;
    let (mut st, mut keys, mut next_id) = State::seed(net, output, &mut path);
    let mut queue: BinaryHeap<Reverse<Cand<W>>> = BinaryHeap::new();
    // Ids of a bit row in increasing order, into a buffer kept across steps.
    let mut ids: Vec<usize> = Vec::with_capacity(2 * n);
    for d in 0..net.ext.len() {
        fill(&mut ids, &mut st.row(d).iter().copied());
        for i in 0..ids.len().saturating_sub(1) {
            st.push_best(ids[i], &keys, &ids[i + 1..], &mut queue);
        }
    }
    while let Some(Reverse(c)) = queue.pop() {
        if !st.remaining.contains_key(&c.k1) || !st.remaining.contains_key(&c.k2) {
            continue; // obsolete
        }
        let (k1, k2, k12) = (c.k1, c.k2, c.k12);
        let id1 = st.remaining.remove(&k1).expect("live");
        let id2 = st.remaining.remove(&k2).expect("live");
        for d in k1.minus(output).ones() {
            st.set(d, id1, false);
        }
        for d in k2.minus(output).ones() {
            st.set(d, id2, false);
        }
        path.push((id1, id2));
        let mut new_id = next_id;
        keys.push(k12);
        st.sizes.push(net.size(k12));
        next_id += 1;
        if let Some(&old) = st.remaining.get(&k12) {
            // Same index set as a live tensor: take the Hadamard product at once.
            path.push((old, new_id));
            let merged = next_id;
            keys.push(k12);
            st.sizes.push(st.sizes[new_id]);
            next_id += 1;
            for d in k12.minus(output).ones() {
                if st.row(d)[old / 64] >> (old % 64) & 1 == 1 {
                    st.set(d, old, false);
                    st.set(d, merged, true);
                }
            }
            new_id = merged;
        } else {
            for d in k12.minus(output).ones() {
                st.set(d, new_id, true);
            }
        }
        st.remaining.insert(k12, new_id);
        st.update_ref_counts(k1 | k2.minus(output));
        // The live ids sharing an index with the new one, in increasing order.
        let words = st.words;
        let union = (0..words).map(|w| {
            let mut acc = k12.ones().fold(0u64, |a, d| a | st.holders[d * words + w]);
            if w == new_id / 64 {
                acc &= !(1 << (new_id % 64));
            }
            acc
        });
        fill(&mut ids, &mut union.into_iter());
        if !ids.is_empty() {
            st.push_best(new_id, &keys, &ids, &mut queue);
        }
    }
    outer_products(net, output, &st.remaining, next_id, &mut path);
    path
}

/// Puts the ids of the bit row `row` into `ids`, in increasing order.
fn fill(ids: &mut Vec<usize>, row: &mut dyn Iterator<Item = u64>) {
    ids.clear();
    for (w, mut bits) in row.enumerate() {
        while bits != 0 {
            ids.push(64 * w + bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
    }
}

/// Joins the live tensors `remaining` (no two share a non-output index) by outer products,
/// smallest first; new ids start at `next_id`.
fn outer_products<const W: usize>(
    net: &Net<'_, '_, W>,
    output: Bits<W>,
    remaining: &FastMap<Bits<W>, usize>,
    mut next_id: usize,
    path: &mut PairPath,
) {
    let mut live: Vec<(Bits<W>, usize)> = remaining.iter().map(|(k, v)| (*k, *v)).collect();
    live.sort_by_key(|x| x.1);
    let mut fq: BinaryHeap<Reverse<(OrdF64, usize, Bits<W>)>> = live
        .into_iter()
        .map(|(k, id)| Reverse((OrdF64(net.size(k & output)), id, k)))
        .collect();
    if let Some(Reverse((_, mut id1, mut k1))) = fq.pop() {
        while let Some(Reverse((_, id2, k2))) = fq.pop() {
            path.push((id1.min(id2), id1.max(id2)));
            let k12 = (k1 | k2) & output;
            let id12 = next_id;
            next_id += 1;
            fq.push(Reverse((OrdF64(net.size(k12)), id12, k12)));
            let Reverse((_, a, b)) = fq.pop().expect("just pushed");
            id1 = a;
            k1 = b;
        }
    }
}

/// An f64 with a total order, for heaps.
#[derive(Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}
