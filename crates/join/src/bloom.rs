//! The striped Bloom filter of the Bloom semi-join.
//!
//! A rank's filter of its distinct left keys has one stripe per rank, and every bit of a key
//! lies in the stripe of the key's owner (the rank a shuffle sends it to). Keys whose bits can
//! collide therefore share an owner, and that owner, which the inspector gives every rank's
//! per-key row counts, rebuilds its stripe of every rank's filter and knows exactly which
//! right keys pass which filter: the false positives are predicted, not estimated. Within a
//! stripe it is an ordinary Bloom filter of [`HASHES`] bits a key at [`BITS_PER_KEY`] bits a
//! key (about 1% false positives when keys spread evenly over owners).

use crate::kernel::key_hash;

/// Filter bits per distinct key.
pub const BITS_PER_KEY: u64 = 10;
/// Bits set per key.
pub const HASHES: u64 = 7;

/// Bits of one stripe of the filter of `n` keys on `p` ranks: a whole number of bytes, at
/// least one.
pub fn stripe_bits(n: u64, p: usize) -> u64 {
    (BITS_PER_KEY * n).div_ceil(8 * p.max(1) as u64).max(1) * 8
}

/// Bytes of the filter of `n` keys on `p` ranks (no filter, 0 bytes, for no keys).
pub fn filter_bytes(n: u64, p: usize) -> u64 {
    if n == 0 {
        0
    } else {
        p as u64 * stripe_bits(n, p) / 8
    }
}

/// The positions of the bits of the key of hash `h` ([`key_hash`]) within a stripe of `s`
/// bits (double hashing over a second hash, independent of the owner's).
fn positions(h: u64, s: u64) -> impl Iterator<Item = u64> {
    let mut g = h ^ 0x9e37_79b9_7f4a_7c15;
    g = (g ^ (g >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    g = (g ^ (g >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    g ^= g >> 31;
    let (a, b) = (g & 0xffff_ffff, (g >> 32) | 1);
    (0..HASHES).map(move |i| a.wrapping_add(i.wrapping_mul(b)) % s)
}

/// One rank's whole filter, as it is sent.
#[derive(Clone, Debug)]
pub struct Bloom {
    p: usize,
    stripe: u64,
    bits: Vec<u8>,
}

impl Bloom {
    /// An empty filter sized for `n` keys on `p` ranks.
    pub fn new(n: u64, p: usize) -> Bloom {
        Bloom {
            p,
            stripe: stripe_bits(n, p),
            bits: vec![0; filter_bytes(n, p) as usize],
        }
    }

    /// The filter of the bytes another rank sent (`p` stripes; empty bytes pass nothing).
    pub fn from_bytes(bits: Vec<u8>, p: usize) -> Bloom {
        let stripe = bits.len() as u64 * 8 / p.max(1) as u64;
        Bloom { p, stripe, bits }
    }

    /// Adds key `k`.
    pub fn insert(&mut self, k: &[u8]) {
        let h = key_hash(k);
        let base = (h % self.p as u64) * self.stripe;
        for b in positions(h, self.stripe) {
            let at = base + b;
            self.bits[(at / 8) as usize] |= 1 << (at % 8);
        }
    }

    /// Whether `k` may have been added (always, if it was).
    pub fn contains(&self, k: &[u8]) -> bool {
        self.contains_hash(key_hash(k))
    }

    /// [`Bloom::contains`] of the key whose [`key_hash`] is `h`.
    pub fn contains_hash(&self, h: u64) -> bool {
        if self.bits.is_empty() {
            return false;
        }
        let base = (h % self.p as u64) * self.stripe;
        positions(h, self.stripe).all(|b| {
            let at = base + b;
            self.bits[(at / 8) as usize] & (1 << (at % 8)) != 0
        })
    }

    /// Its bytes, as sent.
    pub fn bytes(&self) -> &[u8] {
        &self.bits
    }
}

/// One stripe of a rank's filter: what a key's owner rebuilds to know which keys pass it.
#[derive(Clone, Debug)]
pub struct Stripe {
    s: u64,
    bits: Vec<u64>,
}

impl Stripe {
    /// The empty stripe of the filter of `n` keys on `p` ranks.
    pub fn new(n: u64, p: usize) -> Stripe {
        let s = stripe_bits(n, p);
        Stripe {
            s,
            bits: vec![0; s.div_ceil(64) as usize],
        }
    }

    /// Adds key `k` (owned by this stripe's rank).
    pub fn insert(&mut self, k: &[u8]) {
        for b in positions(key_hash(k), self.s) {
            self.bits[(b / 64) as usize] |= 1 << (b % 64);
        }
    }

    /// Whether the filter passes key `k` (owned by this stripe's rank).
    pub fn contains(&self, k: &[u8]) -> bool {
        self.contains_hash(key_hash(k))
    }

    /// [`Stripe::contains`] of the key whose [`key_hash`] is `h`.
    pub fn contains_hash(&self, h: u64) -> bool {
        positions(h, self.s).all(|b| self.bits[(b / 64) as usize] & (1 << (b % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::owner;

    #[test]
    fn a_stripe_agrees_with_the_whole_filter() {
        let p = 3;
        let keys: Vec<Vec<u8>> = (0..500i64).map(|x| x.to_le_bytes().to_vec()).collect();
        let mut whole = Bloom::new(250, p);
        let mut stripes: Vec<Stripe> = (0..p).map(|_| Stripe::new(250, p)).collect();
        for k in &keys[..250] {
            whole.insert(k);
            stripes[owner(k, p)].insert(k);
        }
        let sent = Bloom::from_bytes(whole.bytes().to_vec(), p);
        let mut false_pos = 0;
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                sent.contains(k),
                stripes[owner(k, p)].contains(k),
                "key {i}"
            );
            if i < 250 {
                assert!(sent.contains(k), "key {i} was added");
            } else if sent.contains(k) {
                false_pos += 1;
            }
        }
        // About 1% expected; a tenth of the absent keys would mean a broken filter.
        assert!(false_pos < 25, "{false_pos} false positives of 250");
        assert_eq!(whole.bytes().len() as u64, filter_bytes(250, p));
    }
}
