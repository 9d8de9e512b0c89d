//! What a session refuses ([`SessionError`]), where a result is left ([`OutLayout`]) and what
//! one einsum call did ([`EinsumStats`]): the vocabulary the session's other modules share.

use crate::DType;
use deinsum_plan::Distribution;
use std::path::PathBuf;

/// What a session refuses, or what failed under it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An operand was made by another session.
    #[error("operand {operand} ({name}) belongs to another session: arrays cannot be mixed across sessions")]
    ForeignArray {
        /// Its position among the operands.
        operand: usize,
        /// The array's name.
        name: String,
    },
    /// The session is closed (or an array outlived its session).
    #[error("{what}: its session is closed")]
    Closed {
        /// What was used.
        what: String,
    },
    /// An operand's shape does not fit the expression.
    #[error(
        "operand {operand} ({name}) has shape {shape:?}, which does not fit the expression: {why}"
    )]
    Shape {
        /// Its position among the operands.
        operand: usize,
        /// The array's name.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// What does not fit.
        why: String,
    },
    /// Operands of different element types.
    #[error("operand {operand} ({name}) is {found}, operand 0 is {expected}: one einsum computes in one element type")]
    DType {
        /// Its position among the operands.
        operand: usize,
        /// The array's name.
        name: String,
        /// Operand 0's type.
        expected: DType,
        /// Its type.
        found: DType,
    },
    /// Data of the wrong length or type handed to [`Session::array`] or asked of
    /// [`DistArray::gather`].
    #[error("{0}")]
    Data(String),
    /// Gathering would need more memory than the node has available.
    #[error("gathering {name} needs {bytes} bytes, more than the {available} bytes this node has available")]
    TooLarge {
        /// The array's name.
        name: String,
        /// Bytes the whole array takes.
        bytes: u128,
        /// Bytes available (`MemAvailable`).
        available: u64,
    },
    /// Saving over a file a live array was loaded from (its data is read from it lazily).
    #[error("{}: refusing to overwrite it: {name} was loaded from it and is still alive", .path.display())]
    SaveOverSource {
        /// The file.
        path: PathBuf,
        /// The live array.
        name: String,
    },
    /// Another rank of an MPI session refused the call (its own error is raised there); no
    /// rank went on, so none waits on it.
    #[error("rank {rank} refused this call (see its error); no rank went on")]
    Peer {
        /// The refusing rank (the largest, when several refused).
        rank: usize,
    },
    /// A `.npy` file could not be read or written.
    #[error(transparent)]
    Npy(#[from] deinsum_exec::npy::NpyError),
    /// Compiling or running the einsum failed.
    #[error(transparent)]
    Einsum(#[from] crate::Error),
}

/// Where an einsum's result is left.
#[derive(Clone, Debug, Default)]
pub enum OutLayout {
    /// Where the plan computes it (no move).
    #[default]
    Plan,
    /// In the canonical distribution.
    Canonical,
    /// In this layout (another array's, [`DistArray::layout`]).
    Like(Distribution),
}

/// What one [`Session::einsum`] call did.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumStats {
    /// The expression as given.
    pub expr: String,
    /// Words received over all ranks and steps (measured).
    pub words_moved: u64,
    /// Per operand, the words moved (over all ranks) to bring it to its compute layout
    /// (the plan's, which the run's measured words equal).
    pub operand_words: Vec<u64>,
    /// Whether the plan came from the session's cache.
    pub cached: bool,
    /// The plan's predicted seconds.
    pub predicted_seconds: f64,
    /// The SOAP lower bound on the words one rank must touch (hold, received or resident)
    /// for this einsum, per rank ([`deinsum_plan::Prediction::bound_per_rank`]).
    pub bound_per_rank: f64,
    /// The words the busiest rank touches in the plan (what the bound limits from below).
    pub touched_per_rank: u64,
}
