//! The exact search: dynamic programming over all subsets of operands. The best tree over a
//! subset depends only on the subset (its result's indices are fixed by what lies outside), so
//! `best[S] = min over splits S = A + B of best[A] + best[B] + cost(A, B)` is exact over all
//! binary trees, outer products included. Pruning is sound: a partial sum that already exceeds
//! the best known complete path (costs are non-negative) cannot be part of a better one.
//!
//! opt_einsum's paths may also hold single-operand steps. Only one can pay: summing out of an
//! input the indices that no other input and not the output has (an intermediate already
//! holds only what is needed). So each input is either consumed as it is or reduced first,
//! and that choice is made where the input is consumed: every split whose side is a single
//! input tries both, which keeps the search exact over pairwise paths with such steps. (Steps
//! over three or more operands, which opt_einsum's format also allows, are not searched.)

use super::SsaPath;
use crate::bits::Bits;
use crate::net::Net;

/// Largest operand count (2^n table entries, up to 3^n splits).
pub(crate) const MAX_OPERANDS: usize = 20;

/// The cheapest path, or `None` when no tree keeps every step result within the limit.
/// `upper` is the cost of some feasible path, if known.
pub(crate) fn optimal<const W: usize>(net: &Net<'_, '_, W>, upper: Option<f64>) -> Option<SsaPath> {
    let n = net.n();
    if n <= 1 {
        return Some(SsaPath::new());
    }
    assert!(n <= MAX_OPERANDS, "caller checks the operand count");
    let full: u32 = (1u32 << n) - 1;
    let states = 1usize << n;
    // Leaf-index union of every subset.
    let mut union = vec![Bits::<W>::EMPTY; states];
    for s in 1..states {
        let low = s.trailing_zeros() as usize;
        union[s] = union[s & (s - 1)] | net.inputs[low];
    }
    // Slack so that rounding in a different summation order never prunes the optimum.
    let bound = upper
        .map(|u| u * (1.0 + 1e-9) + 1e-9)
        .unwrap_or(f64::INFINITY);
    // Per input: its indices after summing out those only it has, and that unary step's cost.
    let reduced: Vec<Option<(Bits<W>, f64)>> = (0..n)
        .map(|t| {
            let k = net.inputs[t];
            let r = k & (net.output | union[(full ^ (1u32 << t)) as usize]);
            (r != k && net.fits(r)).then(|| (r, net.nary_cost(&[k], r)))
        })
        .collect();
    // The ways to consume subset `x`: as it is, or (a reducible single input) reduced first.
    let ways = |x: u32, ind: &[Bits<W>]| -> [Option<(Bits<W>, f64)>; 2] {
        let red = if x.count_ones() == 1 {
            reduced[x.trailing_zeros() as usize]
        } else {
            None
        };
        [Some((ind[x as usize], 0.0)), red]
    };
    let mut ind = vec![Bits::<W>::EMPTY; states];
    let mut best = vec![f64::INFINITY; states];
    let mut split = vec![0u32; states];
    // Bit 0: the split's first part is reduced first; bit 1: the second part.
    let mut choice = vec![0u8; states];
    for s in 1..=full {
        let su = s as usize;
        if s.count_ones() == 1 {
            ind[su] = net.inputs[s.trailing_zeros() as usize];
            best[su] = 0.0;
            continue;
        }
        // A subset's result keeps the indices that the output or the rest of the network needs.
        ind[su] = union[su] & (net.output | union[(full ^ s) as usize]);
        if !net.fits(ind[su]) {
            continue;
        }
        let low = s & s.wrapping_neg();
        let rest = s ^ low;
        let mut t = (rest - 1) & rest;
        let mut cur = f64::INFINITY;
        let mut cur_split = 0u32;
        let mut cur_choice = 0u8;
        loop {
            let a = low | t;
            let b = s ^ a;
            let partial = best[a as usize] + best[b as usize];
            if partial < cur && partial <= bound {
                for (i, wa) in ways(a, &ind).iter().enumerate() {
                    let Some((ka, ca)) = *wa else { continue };
                    for (j, wb) in ways(b, &ind).iter().enumerate() {
                        let Some((kb, cb)) = *wb else { continue };
                        let total = partial + ca + cb + net.step_cost(ka, kb, ind[su]);
                        if total < cur && total <= bound {
                            cur = total;
                            cur_split = a;
                            cur_choice = (i | j << 1) as u8;
                        }
                    }
                }
            }
            if t == 0 {
                break;
            }
            t = (t - 1) & rest;
        }
        best[su] = cur;
        split[su] = cur_split;
        choice[su] = cur_choice;
    }
    if !best[full as usize].is_finite() {
        return None;
    }
    let mut path = SsaPath::new();
    emit(full, &split, &choice, n, &mut path);
    Some(path)
}

/// Appends the steps of subset `s`'s best tree (left part first, each part's single-input
/// reduction before the step that consumes it); returns its node id.
fn emit(s: u32, split: &[u32], choice: &[u8], n: usize, path: &mut SsaPath) -> usize {
    if s.count_ones() == 1 {
        return s.trailing_zeros() as usize;
    }
    let a = split[s as usize];
    let c = choice[s as usize];
    let mut x = emit(a, split, choice, n, path);
    if c & 1 != 0 {
        path.push(vec![x]);
        x = n + path.len() - 1;
    }
    let mut y = emit(s ^ a, split, choice, n, path);
    if c & 2 != 0 {
        path.push(vec![y]);
        y = n + path.len() - 1;
    }
    path.push(vec![x, y]);
    n + path.len() - 1
}
