//! Test helpers: einsums built by hand (unchecked), and a brute-force optimum.

#![allow(dead_code)]

use deinsum_expr::{Dim, Index, Operand, ParsedEinsum};
use std::collections::BTreeMap;

/// `es("ab,bc->ac", &[('a', 2), ...], d)`: the einsum with the listed extents, `d` elsewhere.
pub fn es(expr: &str, sizes: &[(char, usize)], default: usize) -> ParsedEinsum {
    let (ins, out) = expr.split_once("->").expect("explicit output");
    let inputs: Vec<Operand> = if ins.is_empty() {
        vec![]
    } else {
        ins.split(',')
            .map(|t| Operand::new(t.chars().map(Dim::Index).collect()))
            .collect()
    };
    let mut extents = BTreeMap::new();
    for c in ins.chars().filter(|c| *c != ',') {
        let e = sizes
            .iter()
            .find(|(x, _)| *x == c)
            .map(|p| p.1)
            .unwrap_or(default);
        extents.insert(c, e);
    }
    ParsedEinsum::from_parts(inputs, out.chars().collect(), extents)
}

/// opt_einsum's FLOP count of contracting positions `i < j` of `live`, and the result indices.
fn pair_cost(
    live: &[Vec<Index>],
    i: usize,
    j: usize,
    out: &[Index],
    ext: &BTreeMap<Index, usize>,
) -> (u128, Vec<Index>) {
    let mut all: Vec<Index> = live[i].clone();
    for c in &live[j] {
        if !all.contains(c) {
            all.push(*c);
        }
    }
    let keep: Vec<Index> = all
        .iter()
        .copied()
        .filter(|c| {
            out.contains(c)
                || live
                    .iter()
                    .enumerate()
                    .any(|(k, t)| k != i && k != j && t.contains(c))
        })
        .collect();
    let size: u128 = all.iter().map(|c| ext[c] as u128).product();
    let factor = if keep.len() < all.len() { 2 } else { 1 };
    (size * factor, keep)
}

/// opt_einsum's FLOP count of summing out of position `i` of `live` the indices no other
/// operand and not the output has (a single-operand step), and the result indices; `None` when
/// there is nothing to sum (such a step only costs).
fn unary_cost(
    live: &[Vec<Index>],
    i: usize,
    out: &[Index],
    ext: &BTreeMap<Index, usize>,
) -> Option<(u128, Vec<Index>)> {
    let keep: Vec<Index> = live[i]
        .iter()
        .copied()
        .filter(|c| {
            out.contains(c)
                || live
                    .iter()
                    .enumerate()
                    .any(|(k, t)| k != i && t.contains(c))
        })
        .collect();
    let size: u128 = live[i].iter().map(|c| ext[c] as u128).product();
    // One term, something summed: max(1, 1 - 1) + 1 = 2 per element, as opt_einsum counts.
    (keep.len() < live[i].len()).then_some((size * 2, keep))
}

/// The cheapest total cost over every sequence of pairwise contractions (so every binary
/// tree) and single-operand reductions (opt_einsum's `(i,)` steps), with each result at most
/// `limit` elements; `None` if no sequence fits. A single-operand step costs the same and
/// gives the same whenever it runs (what an operand alone has stays its own), so the
/// reductions are tried first, in increasing position, and every pairwise order after them.
pub fn brute_force(e: &ParsedEinsum, limit: Option<u128>) -> Option<u128> {
    let live: Vec<Vec<Index>> = e.inputs().iter().map(|o| o.indices.clone()).collect();
    fn go(
        live: Vec<Vec<Index>>,
        out: &[Index],
        ext: &BTreeMap<Index, usize>,
        limit: Option<u128>,
        acc: u128,
        best: &mut Option<u128>,
        unary_from: Option<usize>,
    ) {
        if live.len() == 1 {
            if best.is_none_or(|b| acc < b) {
                *best = Some(acc);
            }
            return;
        }
        for i in unary_from.map_or(0..0, |u| u..live.len()) {
            if let Some((c, k)) = unary_cost(&live, i, out, ext) {
                let size: u128 = k.iter().map(|x| ext[x] as u128).product();
                if limit.is_none_or(|l| size <= l) {
                    let mut next = live.clone();
                    next[i] = k;
                    go(next, out, ext, limit, acc + c, best, Some(i + 1));
                }
            }
        }
        for i in 0..live.len() {
            for j in i + 1..live.len() {
                let (c, mut k) = pair_cost(&live, i, j, out, ext);
                let size: u128 = k.iter().map(|x| ext[x] as u128).product();
                if limit.is_some_and(|l| size > l) {
                    continue;
                }
                let mut next: Vec<Vec<Index>> = live
                    .iter()
                    .enumerate()
                    .filter(|(x, _)| *x != i && *x != j)
                    .map(|(_, t)| t.clone())
                    .collect();
                if next.is_empty() {
                    k = out.to_vec();
                }
                next.push(k);
                go(next, out, ext, limit, acc + c, best, None);
            }
        }
    }
    let mut best = None;
    if live.len() == 1 {
        return None; // unary einsums are not searched
    }
    go(live, e.output(), e.extents(), limit, 0, &mut best, Some(0));
    best
}
