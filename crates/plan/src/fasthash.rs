//! The hasher of the planner's own maps (distributions, move keys, tensor ids): std's
//! SipHash resists keys chosen by an attacker, which these never are, and hashing
//! distributions with it took a tenth of planning a 30-operand network on 2 ranks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hasher of words (the Fx hash of rustc, with its final rotation so that
/// the low bits a table indexes by depend on every input word).
#[derive(Clone, Copy, Default)]
pub(crate) struct FastHasher(u64);

/// The Fx multiplier (odd, bits spread).
const SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl FastHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

/// A `HashMap` hashed by [`FastHasher`] (made with `FastMap::default()`).
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash_of(x: impl Hash) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(x)
    }

    #[test]
    fn equal_keys_hash_alike_and_nearby_keys_apart() {
        assert_eq!(
            hash_of((vec![1usize, 2], 3u64)),
            hash_of((vec![1usize, 2], 3u64))
        );
        let hashes: std::collections::HashSet<u64> = (0..1000usize).map(hash_of).collect();
        assert_eq!(hashes.len(), 1000);
        // The low bits a table indexes by differ too.
        let low: std::collections::HashSet<u64> =
            (0..256usize).map(|i| hash_of(i) & 0xfff).collect();
        assert!(low.len() > 200, "{} distinct low parts of 256", low.len());
        // Byte strings of every length up to a word and past it.
        let strings: std::collections::HashSet<u64> =
            (0..20).map(|n| hash_of(&vec![0u8; n][..])).collect();
        assert_eq!(strings.len(), 20);
        let mut m: FastMap<(u64, u64), usize> = FastMap::default();
        m.insert((1, 2), 3);
        assert_eq!(m.get(&(1, 2)), Some(&3));
    }
}
