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

/// A set of operands of one connected component (bit `i` for its `i`-th operand), as the dp
/// search keeps them: `u128` for components of up to 128 operands (the common case, one
/// register pair), [`Bits`] of `K` words for larger ones.
pub(crate) trait OpSet:
    Copy
    + Eq
    + std::hash::Hash
    + BitOr<Output = Self>
    + BitAnd<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
{
    /// How many operands a set of this type can hold.
    const CAPACITY: usize;
    /// The empty set.
    const EMPTY: Self;
    /// The set of operand `i` alone.
    fn single(i: usize) -> Self;
    /// The operands `0..c` (`c` at most [`Self::CAPACITY`]).
    fn first(c: usize) -> Self;
    /// Whether the set has no operand.
    fn is_empty(self) -> bool;
    /// Number of operands.
    fn len(self) -> usize;
    /// Whether the set has exactly one operand.
    fn is_single(self) -> bool;
    /// The lowest operand (the set is not empty).
    fn lowest(self) -> usize;
    /// The set's operands below 64 as a number (a flat table's index for small components).
    fn low_word(self) -> usize;
    /// The operands in increasing order.
    fn ones(self) -> impl Iterator<Item = usize>;
}

impl OpSet for u128 {
    const CAPACITY: usize = 128;
    const EMPTY: Self = 0;
    fn single(i: usize) -> Self {
        1u128 << i
    }
    fn first(c: usize) -> Self {
        if c == 128 {
            u128::MAX
        } else {
            (1u128 << c) - 1
        }
    }
    fn is_empty(self) -> bool {
        self == 0
    }
    fn len(self) -> usize {
        self.count_ones() as usize
    }
    fn is_single(self) -> bool {
        self != 0 && self & (self - 1) == 0
    }
    fn lowest(self) -> usize {
        self.trailing_zeros() as usize
    }
    fn low_word(self) -> usize {
        self as u64 as usize
    }
    fn ones(self) -> impl Iterator<Item = usize> {
        Ones128 {
            lo: self as u64,
            hi: (self >> 64) as u64,
        }
    }
}

/// The operands of a `u128` set, in increasing order (by 64-bit halves: most components fit
/// the lower one, and a 64-bit step is half the work of a 128-bit one).
struct Ones128 {
    lo: u64,
    hi: u64,
}

impl Iterator for Ones128 {
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

impl<const K: usize> OpSet for Bits<K> {
    const CAPACITY: usize = 64 * K;
    const EMPTY: Self = Bits([0; K]);
    fn single(i: usize) -> Self {
        let mut s = Self::EMPTY;
        s.insert(i);
        s
    }
    fn first(c: usize) -> Self {
        let mut s = Self::EMPTY;
        for (w, word) in s.0.iter_mut().enumerate() {
            *word = match c.saturating_sub(64 * w) {
                0 => 0,
                r if r >= 64 => u64::MAX,
                r => (1u64 << r) - 1,
            };
        }
        s
    }
    fn is_empty(self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    fn len(self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    fn is_single(self) -> bool {
        self.len() == 1
    }
    fn lowest(self) -> usize {
        Bits::ones(self).next().expect("a non-empty set")
    }
    fn low_word(self) -> usize {
        self.0[0] as usize
    }
    fn ones(self) -> impl Iterator<Item = usize> {
        Bits::ones(self)
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
