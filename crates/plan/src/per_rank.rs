//! [`PerRank`]: a figure per rank, stored sparse because most ranks of a large run share it
//! or have none.

use serde::{Deserialize, Serialize};

/// One value per rank, sparse: `(rank, value)` pairs in ascending rank order, ranks whose
/// value is the default (zero) absent. Serialised as the bare list of pairs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    try_from = "Vec<(usize, T)>",
    bound(deserialize = "T: Deserialize<'de> + Copy")
)]
pub struct PerRank<T = u64>(Vec<(usize, T)>);

/// A list of pairs that is not in strictly ascending rank order.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("per-rank list not in ascending rank order at rank {0}")]
pub struct UnorderedRanks(pub usize);

impl<T> Default for PerRank<T> {
    fn default() -> Self {
        PerRank(Vec::new())
    }
}

impl<T: Copy> TryFrom<Vec<(usize, T)>> for PerRank<T> {
    type Error = UnorderedRanks;

    fn try_from(pairs: Vec<(usize, T)>) -> Result<Self, UnorderedRanks> {
        match pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
            Some(w) => Err(UnorderedRanks(w[1].0)),
            None => Ok(PerRank(pairs)),
        }
    }
}

impl<T: Copy> PerRank<T> {
    /// No rank has a value.
    pub fn new() -> Self {
        PerRank(Vec::new())
    }

    /// Sets `rank`'s value; ranks must come in ascending order.
    pub fn push(&mut self, rank: usize, value: T) {
        debug_assert!(
            !matches!(self.0.last(), Some(&(r, _)) if r >= rank),
            "rank {rank}"
        );
        self.0.push((rank, value));
    }

    /// True when no rank is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of ranks listed.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The listed `(rank, value)` pairs, ascending.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (usize, T)> + '_ {
        self.0.iter().copied()
    }

    /// The listed values, by ascending rank.
    pub fn values(&self) -> impl Iterator<Item = T> + '_ {
        self.0.iter().map(|&(_, v)| v)
    }

    /// The pairs as a slice.
    pub fn as_slice(&self) -> &[(usize, T)] {
        &self.0
    }

    /// The highest listed rank.
    pub fn last_rank(&self) -> Option<usize> {
        self.0.last().map(|&(r, _)| r)
    }
}

impl<T: Copy + Default + PartialEq> PerRank<T> {
    /// Dense values indexed by rank, default (zero) values dropped.
    pub fn from_dense(dense: impl IntoIterator<Item = T>) -> Self {
        let zero = T::default();
        PerRank(
            dense
                .into_iter()
                .enumerate()
                .filter(|&(_, v)| v != zero)
                .collect(),
        )
    }

    /// `rank`'s value (the default, zero, when absent).
    pub fn get(&self, rank: usize) -> T {
        self.0
            .binary_search_by_key(&rank, |&(r, _)| r)
            .map_or_else(|_| T::default(), |i| self.0[i].1)
    }
}

impl<T: PartialEq> PartialEq<Vec<(usize, T)>> for PerRank<T> {
    fn eq(&self, other: &Vec<(usize, T)>) -> bool {
        &self.0 == other
    }
}
