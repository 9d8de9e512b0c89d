//! The bottom of deinsum: the process's threads and what reads the machine they run on.
//!
//! Job: build every rayon pool of the process through one builder ([`PoolBuilder`]: named
//! threads, a thread count, an optional start handler), keep the process-wide pool for
//! data-parallel work outside a rank's own pool ([`install`]), mark the threads that carry
//! in-process ranks ([`mark_carrier`]), count cores ([`cores`], [`node_cores`]) and lock
//! mutexes without poisoning ([`lock`]).
//!
//! Invariant: a pool kept across runs is used only by the process that built it
//! ([`ProcessPool`]); a forked child (Python's multiprocessing on Linux), which has none of its
//! parent's threads, builds its own. No compiler crate holds threads: they borrow this
//! crate's.
//!
//! API boundary: internal (for deinsum's own crates; not part of the facade).

#![warn(missing_docs)]

mod carrier;
mod cores;
mod pool;
mod sync;

pub use carrier::{in_worker_pool, mark_carrier, on_carrier};
pub use cores::{cores, node_cores};
pub use pool::{install, map_in_order, Pool, PoolBuilder, ProcessPool};
pub use sync::lock;
