//! Fixed-width bit sets over dense index ids, the currency of every search.

use std::ops::{BitAnd, BitOr, BitXor, Not};

/// A set of index ids `0..64*W`, stored inline so the searches never allocate for set algebra.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub(crate) struct Bits<const W: usize>(pub(crate) [u64; W]);

impl<const W: usize> Bits<W> {
    /// The empty set.
    pub(crate) const EMPTY: Self = Bits([0; W]);

    /// Adds id `i`.
    pub(crate) fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1u64 << (i % 64);
    }

    /// Removes id `i`.
    pub(crate) fn remove(&mut self, i: usize) {
        self.0[i / 64] &= !(1u64 << (i % 64));
    }

    /// Elements of `self` not in `other`.
    pub(crate) fn minus(self, other: Self) -> Self {
        let mut r = self;
        for (a, b) in r.0.iter_mut().zip(other.0.iter()) {
            *a &= !b;
        }
        r
    }

    /// Whether the two sets share an element.
    pub(crate) fn intersects(&self, other: &Self) -> bool {
        self.0.iter().zip(other.0.iter()).any(|(a, b)| a & b != 0)
    }

    /// The ids in increasing order.
    pub(crate) fn ones(self) -> impl Iterator<Item = usize> {
        (0..W).flat_map(move |w| {
            let mut word = self.0[w];
            std::iter::from_fn(move || {
                if word == 0 {
                    None
                } else {
                    let t = word.trailing_zeros() as usize;
                    word &= word - 1;
                    Some(w * 64 + t)
                }
            })
        })
    }
}

impl<const W: usize> BitOr for Bits<W> {
    type Output = Self;
    fn bitor(mut self, o: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a |= b;
        }
        self
    }
}

impl<const W: usize> BitAnd for Bits<W> {
    type Output = Self;
    fn bitand(mut self, o: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a &= b;
        }
        self
    }
}

impl<const W: usize> BitXor for Bits<W> {
    type Output = Self;
    fn bitxor(mut self, o: Self) -> Self {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a ^= b;
        }
        self
    }
}

impl<const W: usize> Not for Bits<W> {
    type Output = Self;
    fn not(mut self) -> Self {
        for a in self.0.iter_mut() {
            *a = !*a;
        }
        self
    }
}

/// A fast multiplicative hasher for bit-set and mask keys (SipHash dominated the lookups).
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for b in chunks.remainder() {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A `HashMap` with [`FastHasher`] (lookups only; never iterated into output).
pub(crate) type FastMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;
