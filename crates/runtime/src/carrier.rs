//! The carrier-thread mark: which threads carry in-process ranks.

use std::cell::Cell;

thread_local! {
    /// Whether this thread carries in-process ranks (set by the executor on its kept threads).
    static CARRIER: Cell<bool> = const { Cell::new(false) };
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
/// own pool, the process's ([`crate::install`]), or the caller's pool a rank 0 runs in (not a
/// rank carrier).
pub fn in_worker_pool() -> bool {
    rayon::current_thread_index().is_some() && !on_carrier()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolBuilder;

    #[test]
    fn only_marked_threads_are_carriers() {
        let carriers = PoolBuilder::new(|i| format!("test-carrier-{i}"))
            .threads(2)
            .on_start(|_| mark_carrier())
            .build()
            .unwrap();
        let plain = PoolBuilder::new(|i| format!("test-plain-{i}"))
            .threads(2)
            .build()
            .unwrap();
        let marked = carriers.broadcast(|_| (on_carrier(), in_worker_pool()));
        assert_eq!(marked, vec![(true, false); 2]);
        let unmarked = plain.broadcast(|_| (on_carrier(), in_worker_pool()));
        assert_eq!(unmarked, vec![(false, true); 2]);
        // The test's own thread is no rayon worker and was never marked.
        assert!(!on_carrier());
        assert!(!in_worker_pool());
    }
}
