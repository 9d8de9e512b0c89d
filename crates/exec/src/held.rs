//! Blocks as a rank holds them during a run: its own, or one block that the in-process ranks
//! of an all-gather share.
//!
//! In-process ranks share memory, so a block that a move replicates over a fibre (an
//! all-gather) is assembled once and read by every member ([`HeldBlock::Shared`]) instead of
//! being copied into each member's own block. Kernels only read their inputs; a shared block
//! that must change is copied first ([`HeldBlock::make_mut`]).

use crate::kernels::LocalTensor;
use crate::pool::{Home, OutOfMemory};
use crate::Scalar;
use std::sync::Arc;

/// A block shared read-only by several ranks; when the last holder drops it, its buffer goes
/// back to the pool of the rank that allocated it.
pub(crate) struct SharedBlock<T: Send + 'static> {
    block: Option<LocalTensor<T>>,
    home: Home,
}

impl<T: Send + 'static> SharedBlock<T> {
    /// Shares `block`, whose buffer came from the calling rank's pool.
    pub(crate) fn new(block: LocalTensor<T>) -> Self {
        SharedBlock {
            block: Some(block),
            home: Home::here(),
        }
    }

    fn get(&self) -> &LocalTensor<T> {
        self.block.as_ref().expect("a shared block until dropped")
    }
}

impl<T: Send + 'static> Drop for SharedBlock<T> {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            self.home.give(b.data);
        }
    }
}

/// A block a rank holds: its own, or a block shared with other in-process ranks.
pub(crate) enum HeldBlock<T: Send + 'static> {
    /// The rank's own block.
    Own(LocalTensor<T>),
    /// A block read by every member of a fibre.
    Shared(Arc<SharedBlock<T>>),
}

impl<T: Send + 'static> std::ops::Deref for HeldBlock<T> {
    type Target = LocalTensor<T>;

    fn deref(&self) -> &LocalTensor<T> {
        match self {
            HeldBlock::Own(b) => b,
            HeldBlock::Shared(s) => s.get(),
        }
    }
}

impl<T: Scalar> HeldBlock<T> {
    /// The block as the rank's own: a shared one is taken when no other rank holds it any
    /// more, copied otherwise.
    pub(crate) fn into_owned(self) -> Result<LocalTensor<T>, OutOfMemory> {
        match self {
            HeldBlock::Own(b) => Ok(b),
            HeldBlock::Shared(s) => match Arc::try_unwrap(s) {
                Ok(mut s) => Ok(s.block.take().expect("a shared block until dropped")),
                Err(s) => s.get().try_clone(),
            },
        }
    }

    /// The block to write: a shared one becomes the rank's own first (copy on write).
    pub(crate) fn make_mut(&mut self) -> Result<&mut LocalTensor<T>, OutOfMemory> {
        if let HeldBlock::Shared(s) = self {
            *self = HeldBlock::Own(s.get().try_clone()?);
        }
        match self {
            HeldBlock::Own(b) => Ok(b),
            HeldBlock::Shared(_) => unreachable!("made the rank's own above"),
        }
    }

    /// Lets go of the block: the rank's own buffer goes to its pool, a shared one to its
    /// allocator's pool once the last holder lets go.
    pub(crate) fn release(self) {
        if let HeldBlock::Own(b) = self {
            crate::pool::give(b.data);
        }
    }
}
