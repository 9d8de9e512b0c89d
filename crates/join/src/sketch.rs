//! Fixed-size, mergeable sketches of a key column for the sketch inspector: a HyperLogLog of
//! the distinct keys and a Misra–Gries summary of the heavy hitters. Both merge exactly (the
//! merge of every rank's sketch, in rank order, is the same bytes on every rank), so a
//! collective of a few kilobytes a rank stands in for the all-to-all of every distinct key.
//!
//! Our own small implementations, so no new dependency: the HyperLogLog estimator is Ertl's
//! improved raw estimator ("New cardinality estimation algorithms for HyperLogLog sketches",
//! 2017), bias-free from one key to 2⁶⁴ without the empirical tables of HLL++, in 40 lines; the
//! Misra–Gries summary borrows its keys from the table (no copy a row) and is keyed by the
//! hash the shuffle already computes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Register-index bits of a [`Hll`]: 2¹² one-byte registers (4 KiB), standard error
/// 1.04/√4096 ≈ 1.6%.
pub const HLL_BITS: u32 = 12;

/// The relative standard error of a [`Hll`] estimate.
pub fn hll_std_error() -> f64 {
    1.04 / ((1u64 << HLL_BITS) as f64).sqrt()
}

/// A second mix of a [`crate::kernel::key_hash`] (splitmix64's finalizer): the owner of a key
/// is that hash modulo P, so the registers take bits independent of it.
#[inline]
pub fn remix(h: u64) -> u64 {
    let mut z = h ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A HyperLogLog sketch of distinct 64-bit hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hll {
    regs: Vec<u8>,
}

impl Default for Hll {
    fn default() -> Self {
        Hll::new()
    }
}

impl Hll {
    /// An empty sketch.
    pub fn new() -> Hll {
        Hll {
            regs: vec![0; 1 << HLL_BITS],
        }
    }

    /// Adds a key by its [`crate::kernel::key_hash`].
    #[inline]
    pub fn add_hash(&mut self, h: u64) {
        let z = remix(h);
        let i = (z >> (64 - HLL_BITS)) as usize;
        // The rank of the first one bit of the other 52 bits, capped at 53 (all zero).
        let w = z << HLL_BITS;
        let rho = (w.leading_zeros() + 1).min(64 - HLL_BITS + 1) as u8;
        if rho > self.regs[i] {
            self.regs[i] = rho;
        }
    }

    /// Merges `other` in (the sketch of the union).
    pub fn merge(&mut self, other: &Hll) {
        for (a, &b) in self.regs.iter_mut().zip(&other.regs) {
            *a = (*a).max(b);
        }
    }

    /// The registers, as sent.
    pub fn bytes(&self) -> &[u8] {
        &self.regs
    }

    /// The sketch of registers another rank sent.
    pub fn from_bytes(b: &[u8]) -> Result<Hll, String> {
        if b.len() != 1 << HLL_BITS {
            return Err(format!("a HyperLogLog of {} registers", b.len()));
        }
        Ok(Hll { regs: b.to_vec() })
    }

    /// The estimated number of distinct keys added (Ertl's improved raw estimator).
    pub fn estimate(&self) -> f64 {
        let m = self.regs.len() as f64;
        let q = (64 - HLL_BITS) as usize;
        let mut c = vec![0u64; q + 2];
        for &r in &self.regs {
            c[r as usize] += 1;
        }
        let mut z = m * tau(1.0 - c[q + 1] as f64 / m);
        for k in (1..=q).rev() {
            z = 0.5 * (z + c[k] as f64);
        }
        z += m * sigma(c[0] as f64 / m);
        m * m / (2.0 * std::f64::consts::LN_2) / z
    }
}

/// Ertl's σ(x) = x + Σ_{k≥1} x^{2^k} 2^{k-1}.
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let z0 = z;
        z += x * y;
        y += y;
        if z == z0 {
            return z;
        }
    }
}

/// Ertl's τ(x) = (1 - x - Σ_{k≥1} (1 - x^{2^-k})² 2^-k) / 3.
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let z0 = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if z == z0 {
            return z / 3.0;
        }
    }
}

/// Hashes that are already [`crate::kernel::key_hash`]es, used as they are.
#[derive(Default)]
pub struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A map keyed by [`crate::kernel::key_hash`].
pub type HashKeyed<V> = HashMap<u64, V, BuildHasherDefault<Identity>>;

/// A Misra–Gries summary of `k` counters over keys (identified by their
/// [`crate::kernel::key_hash`]; two keys of one 64-bit hash would share a counter): after
/// `n` rows every key of more than `n / (k + 1)` rows has a counter, and a counter
/// undercounts its key by at most `n / (k + 1)` ([`MisraGries::error`]). Counters are
/// batched: up to `2k` are kept, and when more are wanted the (k+1)-th largest count is
/// taken off every counter (the mergeable summaries' rule, Agarwal et al. 2012), which keeps
/// the bound and costs O(1) a row amortized.
#[derive(Clone, Debug)]
pub struct MisraGries<'a> {
    k: usize,
    rows: u64,
    /// Rows taken off every counter so far (the bound on the undercount).
    taken: u64,
    counts: HashKeyed<(u64, &'a [u8])>,
}

impl<'a> MisraGries<'a> {
    /// An empty summary of `k` counters (at least one).
    pub fn new(k: usize) -> MisraGries<'a> {
        let k = k.max(1);
        MisraGries {
            k,
            rows: 0,
            taken: 0,
            counts: HashKeyed::with_capacity_and_hasher(2 * k + 1, Default::default()),
        }
    }

    /// Counts `w` rows of key `key`, whose hash is `h`.
    #[inline]
    pub fn add(&mut self, h: u64, key: &'a [u8], w: u64) {
        self.rows += w;
        self.counts.entry(h).or_insert((0, key)).0 += w;
        if self.counts.len() > 2 * self.k {
            self.reduce();
        }
    }

    /// Takes the (k+1)-th largest count off every counter, dropping those left at zero.
    fn reduce(&mut self) {
        if self.counts.len() <= self.k {
            return;
        }
        let mut c: Vec<u64> = self.counts.values().map(|e| e.0).collect();
        let (_, &mut cut, _) = c.select_nth_unstable_by(self.k, |a, b| b.cmp(a));
        self.counts.retain(|_, e| {
            e.0 = e.0.saturating_sub(cut);
            e.0 > 0
        });
        self.taken += cut;
    }

    /// Drops the counters under `min` rows; the bound of [`MisraGries::error`] grows by
    /// `min - 1` (a dropped key's count is now 0).
    pub fn drop_under(&mut self, min: u64) {
        if min <= 1 {
            return;
        }
        let before = self.counts.len();
        self.counts.retain(|_, e| e.0 >= min);
        if self.counts.len() < before {
            self.taken += min - 1;
        }
    }

    /// Merges `other` in: counters added, then reduced to `k`.
    pub fn merge(&mut self, other: &MisraGries<'a>) {
        self.rows += other.rows;
        self.taken += other.taken;
        for (&h, &(n, key)) in &other.counts {
            self.counts.entry(h).or_insert((0, key)).0 += n;
        }
        self.reduce();
    }

    /// Counters kept (k).
    pub fn capacity(&self) -> usize {
        self.k
    }

    /// Rows counted.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The most a counter undercounts its key's rows (at most `rows / (k + 1)`).
    pub fn error(&self) -> u64 {
        self.taken
    }

    /// The counters, largest count first (equal counts by key bytes): the same order on
    /// every rank for the same summary.
    pub fn top(&self) -> Vec<(&'a [u8], u64)> {
        self.reduced_view()
    }

    fn reduced_view(&self) -> Vec<(&'a [u8], u64)> {
        let mut v: Vec<(&'a [u8], u64)> = self.counts.values().map(|&(n, k)| (k, n)).collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        // At most k counters name a key certainly over the bound; the batch's extra ones are
        // cut at the (k+1)-th count as a reduction would.
        if v.len() > self.k {
            let cut = v[self.k].1;
            v.truncate(self.k);
            for e in &mut v {
                e.1 -= cut;
            }
            v.retain(|e| e.1 > 0);
        }
        v
    }

    /// The summary as bytes (rows, taken, then every counter as count, key length, key).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let top = self.top();
        // Cutting to k in `top` takes the cut off every counter.
        let cut = if self.counts.len() > self.k {
            let mut c: Vec<u64> = self.counts.values().map(|e| e.0).collect();
            c.sort_unstable_by(|a, b| b.cmp(a));
            c[self.k]
        } else {
            0
        };
        out.extend_from_slice(&self.rows.to_le_bytes());
        out.extend_from_slice(&(self.taken + cut).to_le_bytes());
        out.extend_from_slice(&(top.len() as u32).to_le_bytes());
        for (key, n) in top {
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
        }
    }

    /// The summary of `k` counters another rank encoded at the front of `b` (which moves past
    /// it), its keys borrowed from `b`.
    pub fn decode(k: usize, b: &mut &'a [u8]) -> Result<MisraGries<'a>, String> {
        let bad = || "a truncated Misra-Gries summary".to_string();
        let word = |b: &mut &'a [u8], n: usize| -> Result<&'a [u8], String> {
            if b.len() < n {
                return Err(bad());
            }
            let (a, rest) = b.split_at(n);
            *b = rest;
            Ok(a)
        };
        let u64_of = |x: &[u8]| u64::from_le_bytes(x.try_into().expect("8"));
        let u32_of = |x: &[u8]| u32::from_le_bytes(x.try_into().expect("4")) as usize;
        let mut m = MisraGries::new(k);
        m.rows = u64_of(word(b, 8)?);
        m.taken = u64_of(word(b, 8)?);
        let n = u32_of(word(b, 4)?);
        for _ in 0..n {
            let c = u64_of(word(b, 8)?);
            let len = u32_of(word(b, 4)?);
            let key = word(b, len)?;
            m.counts.insert(crate::kernel::key_hash(key), (c, key));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::key_hash;

    #[test]
    fn hll_of_nothing_and_of_one_key() {
        let mut h = Hll::new();
        assert_eq!(h.estimate(), 0.0);
        h.add_hash(key_hash(b"x"));
        h.add_hash(key_hash(b"x"));
        assert!((h.estimate() - 1.0).abs() < 0.01, "{}", h.estimate());
    }

    #[test]
    fn misra_gries_keeps_every_key_over_the_bound() {
        let keys: Vec<[u8; 8]> = (0..5000u64).map(|i| i.to_le_bytes()).collect();
        let mut m = MisraGries::new(10);
        let mut n = 0u64;
        // Key 0 a third of the rows, the rest once each.
        for (i, k) in keys.iter().enumerate() {
            m.add(key_hash(&keys[0]), &keys[0], 1);
            m.add(key_hash(k), k, 1);
            n += 2;
            if i % 2 == 0 {
                m.add(key_hash(k), k, 1);
                n += 1;
            }
        }
        assert_eq!(m.rows(), n);
        assert!(m.error() <= n / 11);
        let top = m.top();
        assert_eq!(top[0].0, &keys[0][..]);
        assert!(top[0].1 + m.error() >= 5001 && top[0].1 <= 5001);
    }
}
