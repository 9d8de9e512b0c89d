//! The process's worker threads for data-parallel work outside a rank's own pool (planning
//! the candidate trees and grids, sparse kernels): a rayon pool kept for the process, used
//! instead of rayon's global pool because a process forked after using that one (Python's
//! multiprocessing on Linux) inherits a pool whose threads are not there, and its next
//! parallel call waits for them forever. This pool is built again in a forked child.

use std::sync::{Arc, Mutex};

thread_local! {
    /// Whether this thread carries in-process ranks (set by the executor on its kept threads).
    static CARRIER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one that carries in-process ranks: a rayon worker whose
/// pool is not for splitting the rank's work over.
pub fn mark_carrier() {
    CARRIER.with(|c| c.set(true));
}

/// Whether the calling thread carries in-process ranks (see [`mark_carrier`]).
pub fn on_carrier() -> bool {
    CARRIER.with(|c| c.get())
}

/// Whether the calling thread is a worker of a rayon pool its work may split over: a rank's
/// own pool, this module's, or the caller's pool a rank 0 runs in (not a rank carrier).
pub fn in_worker_pool() -> bool {
    rayon::current_thread_index().is_some() && !on_carrier()
}

/// Runs `f`, whose rayon calls then split over the workers of the pool it runs in: the
/// calling thread's own when it is a worker (see [`in_worker_pool`]), else the process's kept
/// pool (as many threads as rayon's default), built again after a fork. When no pool can be
/// built, `f` runs on the calling thread with rayon's global pool.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if in_worker_pool() {
        return f();
    }
    match kept() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// The kept pool of this process (`None` when it cannot be built).
fn kept() -> Option<Arc<rayon::ThreadPool>> {
    static KEPT: Mutex<Option<ProcessPool>> = Mutex::new(None);
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = kept.as_ref().and_then(ProcessPool::here) {
        return Some(pool.clone());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("deinsum-worker-{i}"))
        .build()
        .ok()?;
    let pool = Arc::new(pool);
    *kept = Some(ProcessPool::new(pool.clone()));
    Some(pool)
}

/// A rayon pool kept across runs, with the process that built it: in that process it is
/// used and dropped as usual; in a forked child (which has none of its parent's threads) it is
/// not used, and dropping it forgets it, as dropping it would signal threads that are not there.
pub struct ProcessPool {
    by: u32,
    pool: Option<Arc<rayon::ThreadPool>>,
}

impl ProcessPool {
    /// `pool`, built by this process.
    pub fn new(pool: Arc<rayon::ThreadPool>) -> Self {
        ProcessPool {
            by: std::process::id(),
            pool: Some(pool),
        }
    }

    /// The pool, when this process built it.
    pub fn here(&self) -> Option<&Arc<rayon::ThreadPool>> {
        self.pool.as_ref().filter(|_| self.by == std::process::id())
    }
}

impl Drop for ProcessPool {
    fn drop(&mut self) {
        if self.by != std::process::id() {
            std::mem::forget(self.pool.take());
        }
    }
}
