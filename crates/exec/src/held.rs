//! Blocks as a rank holds them during a run: its own, or one block that the in-process ranks
//! of an all-gather share.
//!
//! In-process ranks share memory, so a block that a move replicates over a fibre (an
//! all-gather) is assembled once and read by every member ([`HeldBlock::Shared`]) instead of
//! being copied into each member's own block. Kernels only read their inputs; a shared block
//! that must change is copied first ([`HeldBlock::make_mut`]). A rank's own block may also be
//! read in place from an operand the caller lent ([`crate::kernels::Data::Lent`]); it too is
//! copied before it is written.

use crate::block::{Data, LocalBlock, LocalTensor};
use crate::buffers::{Home, OutOfMemory};
use crate::Scalar;
use std::sync::Arc;

/// A block shared read-only by several ranks; when the last holder drops it, its buffer goes
/// back to the free list of the rank that allocated it.
pub(crate) struct SharedBlock<T: Send + 'static> {
    block: Option<LocalTensor<T>>,
    home: Home,
}

impl<T: Send + 'static> SharedBlock<T> {
    /// Shares `block`, whose buffer came from the calling rank's free list.
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
            if let Data::Own(v) = b.data {
                self.home.give(v);
            }
        }
    }
}

/// A block a rank holds: its own, or a block shared with other in-process ranks.
pub(crate) enum HeldBlock<'a, T: Send + 'static> {
    /// The rank's own block (its own buffer, or read in place from a lent operand).
    Own(LocalBlock<'a, T>),
    /// A block read by every member of a fibre.
    Shared(Arc<SharedBlock<T>>),
}

impl<'a, T: Send + 'static> std::ops::Deref for HeldBlock<'a, T> {
    type Target = LocalBlock<'a, T>;

    fn deref(&self) -> &LocalBlock<'a, T> {
        match self {
            HeldBlock::Own(b) => b,
            HeldBlock::Shared(s) => s.get(),
        }
    }
}

impl<'a, T: Scalar> HeldBlock<'a, T> {
    /// The block as the rank's own buffer: a shared one is taken when no other rank holds it
    /// any more, copied otherwise; a lent one is copied.
    pub(crate) fn into_owned(self) -> Result<LocalTensor<T>, OutOfMemory> {
        match self {
            HeldBlock::Own(b) => b.into_static(),
            HeldBlock::Shared(s) => match Arc::try_unwrap(s) {
                Ok(mut s) => Ok(s.block.take().expect("a shared block until dropped")),
                Err(s) => s.get().try_clone(),
            },
        }
    }

    /// The block to write: a shared or lent one becomes the rank's own first (copy on
    /// write); with the words of rank memory that copy added (a shared block already counts
    /// as its holders' own, a lent one counts nothing until copied).
    pub(crate) fn make_mut(&mut self) -> Result<(&mut LocalBlock<'a, T>, u64), OutOfMemory> {
        let added = match self {
            HeldBlock::Shared(s) => {
                *self = HeldBlock::Own(s.get().try_clone()?);
                0
            }
            HeldBlock::Own(b) if b.data.is_lent() => {
                let copy = crate::buffers::try_copy(&b.data)?;
                let words = copy.len() as u64;
                b.data = Data::Own(copy);
                words
            }
            HeldBlock::Own(_) => 0,
        };
        match self {
            HeldBlock::Own(b) => Ok((b, added)),
            HeldBlock::Shared(_) => unreachable!("made the rank's own above"),
        }
    }

    /// Words of rank memory the block takes (see [`Data::own_words`]; a shared block counts
    /// whole for every holder, as the plan's memory model counts it).
    pub(crate) fn words(&self) -> u64 {
        match self {
            HeldBlock::Own(b) => b.data.own_words(),
            HeldBlock::Shared(s) => s.get().data.len() as u64,
        }
    }

    /// Lets go of the block: the rank's own buffer goes to its free list, a shared one to its
    /// allocator's free list once the last holder lets go.
    pub(crate) fn release(self) {
        if let HeldBlock::Own(b) = self {
            b.data.release();
        }
    }
}
