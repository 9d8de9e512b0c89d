//! Why no path could be produced ([`PathError`]): below the searches, which return it.

use crate::net::MAX_INDICES;

/// Why no path could be produced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// `--optimize NAME` named no registered strategy.
    #[error("unknown path strategy `{name}` (known: {known})")]
    UnknownStrategy {
        /// The name given.
        name: String,
        /// The registered names.
        known: String,
    },
    /// No path keeps every intermediate (and the output) within the memory limit.
    #[error("no contraction path keeps every intermediate within the memory limit of {limit} elements: {detail}")]
    MemoryLimit {
        /// The limit, in elements.
        limit: u128,
        /// Which search said so and how sure it is.
        detail: String,
    },
    /// The strategy does not handle this many operands.
    #[error("the {strategy} strategy handles at most {max} operands, this einsum has {n}; use {instead}")]
    TooManyOperands {
        /// Strategy name.
        strategy: String,
        /// Its limit.
        max: usize,
        /// Operands given.
        n: usize,
        /// The strategies that take this einsum, as the message lists them.
        instead: String,
    },
    /// The strategy does not handle this many operands joined through summed indices (it
    /// solves each connected piece of the network apart, any number of pieces).
    #[error("the {strategy} strategy handles at most {max} operands joined through summed indices, this einsum joins {n}; use {instead}")]
    TooLargeComponent {
        /// Strategy name.
        strategy: String,
        /// Its limit.
        max: usize,
        /// Operands of the largest connected piece.
        n: usize,
        /// The strategies that take this einsum, as the message lists them.
        instead: String,
    },
    /// More distinct indices than the searches represent.
    #[error("too many distinct indices ({0}; at most {max})", max = MAX_INDICES)]
    TooManyIndices(usize),
    /// A given path (linear or SSA) does not describe a contraction of this einsum.
    #[error("invalid contraction path: {0}")]
    InvalidPath(String),
    /// The einsum itself is malformed (only possible when built by hand).
    #[error("invalid einsum: {0}")]
    InvalidEinsum(String),
}
