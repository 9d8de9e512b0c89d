//! Thread pools: the one builder every pool of the process goes through, the pool kept for a
//! process (safe across a fork), and the process's own pool for data-parallel work outside a
//! rank's pool.
//!
//! The process pool is used instead of rayon's global pool because a process forked after
//! using that one (Python's multiprocessing on Linux) inherits a pool whose threads are not
//! there, and its next parallel call waits for them forever. This pool is built again in a
//! forked child.

use crate::carrier::in_worker_pool;
use crate::sync::lock;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Builds a rayon pool of the process: its threads named by the given function, as many as
/// asked (rayon's default, one per core, unless [`PoolBuilder::threads`] says), each running
/// an optional start handler before its first job.
#[must_use = "a PoolBuilder does nothing until built"]
pub struct PoolBuilder {
    builder: rayon::ThreadPoolBuilder,
    start: Option<Box<StartHandler>>,
}

/// What a pool's thread runs when it starts (see [`PoolBuilder::on_start`]).
type StartHandler = dyn Fn(usize) + Send + Sync;

impl std::fmt::Debug for PoolBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuilder")
            .field("builder", &self.builder)
            .field("start", &self.start.is_some())
            .finish()
    }
}

impl PoolBuilder {
    /// A pool whose `i`-th thread is called `name(i)` (threads are numbered from 0).
    pub fn new(name: impl FnMut(usize) -> String + 'static) -> Self {
        PoolBuilder {
            builder: rayon::ThreadPoolBuilder::new().thread_name(name),
            start: None,
        }
    }

    /// `n` threads (0 keeps rayon's default, one per core).
    pub fn threads(self, n: usize) -> Self {
        PoolBuilder {
            builder: self.builder.num_threads(n),
            ..self
        }
    }

    /// Runs `start(i)` on the `i`-th thread when it starts, before it takes any job.
    pub fn on_start(self, start: impl Fn(usize) + Send + Sync + 'static) -> Self {
        PoolBuilder {
            start: Some(Box::new(start)),
            ..self
        }
    }

    /// The pool (an error when its threads cannot be spawned).
    pub fn build(self) -> Result<Pool, rayon::ThreadPoolBuildError> {
        let exited = Arc::new((Mutex::new(0usize), Condvar::new()));
        let seen = exited.clone();
        let start = self.start;
        let pool = self
            .builder
            .start_handler(move |i| {
                // Registered before the thread's other thread-locals (crossbeam-epoch's
                // handle, first used by its first job), so dropped after them: the exit is
                // counted once what the thread hands back at its end has been handed back.
                EXIT.with(|e| {
                    *e.borrow_mut() = Some(ExitSignal(seen.clone()));
                });
                if let Some(start) = &start {
                    start(i);
                }
            })
            .build()?;
        Ok(Pool {
            threads: pool.current_num_threads(),
            pool: Some(pool),
            exited,
        })
    }
}

/// Counts its thread's exit, and signals it, when the thread's thread-locals are dropped.
struct ExitSignal(Arc<(Mutex<usize>, Condvar)>);

impl Drop for ExitSignal {
    fn drop(&mut self) {
        let (count, cv) = &*self.0;
        *lock(count) += 1;
        cv.notify_all();
    }
}

thread_local! {
    /// The exit signal of a pool thread (set by its start handler).
    static EXIT: std::cell::RefCell<Option<ExitSignal>> = const { std::cell::RefCell::new(None) };
}

/// Rounds of crossbeam-epoch collection after a pool's threads have exited: each round frees
/// up to 8 bags of deferred frees, and each exited thread left one besides its epoch entry
/// (which holds on to the allocator's reservation for that thread, 32 MiB of address space).
fn epoch_rounds(threads: usize) -> usize {
    threads.div_ceil(4) + 16
}

/// Longest wait of [`Pool`]'s drop for its threads: a thread stuck in foreign code must not
/// hang the caller for good.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A rayon pool whose drop returns once its threads have exited: rayon's own drop only asks
/// them to, so a call that built and dropped a thousand threads left hundreds alive after it
/// returned. Dereferences to the rayon pool.
pub struct Pool {
    pool: Option<rayon::ThreadPool>,
    threads: usize,
    /// Threads that have exited, and the signal of each exit.
    exited: Arc<(Mutex<usize>, Condvar)>,
}

impl std::ops::Deref for Pool {
    type Target = rayon::ThreadPool;
    fn deref(&self) -> &rayon::ThreadPool {
        self.pool
            .as_ref()
            .expect("a pool is only taken by its drop")
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else { return };
        // One of its own threads cannot wait for itself to exit.
        let own = pool.current_thread_index().is_some();
        drop(pool);
        if own {
            return;
        }
        let (count, cv) = &*self.exited;
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let mut exited = lock(count);
        while *exited < self.threads {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            exited = match cv.wait_timeout(exited, left) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        drop(exited);
        // The exited threads' epoch entries (rayon's deques are crossbeam's) are freed only by
        // a later collection: run it now, so that what they pin is released with the pool.
        for _ in 0..epoch_rounds(self.threads) {
            crossbeam_epoch::pin().flush();
        }
    }
}

/// A rayon pool kept across runs, with the process that built it: in that process it is
/// used and dropped as usual; in a forked child (which has none of its parent's threads) it is
/// not used, and dropping it forgets it, as dropping it would signal threads that are not there.
pub struct ProcessPool {
    by: u32,
    pool: Option<Arc<Pool>>,
}

impl ProcessPool {
    /// `pool`, built by this process.
    pub fn new(pool: Arc<Pool>) -> Self {
        Self::built_by(pool, std::process::id())
    }

    /// `pool`, built by the process `by`.
    fn built_by(pool: Arc<Pool>, by: u32) -> Self {
        ProcessPool {
            by,
            pool: Some(pool),
        }
    }

    /// The pool, when this process built it.
    pub fn here(&self) -> Option<&Arc<Pool>> {
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

/// Runs `f`, whose rayon calls then split over the workers of the pool it runs in: the
/// calling thread's own when it is a worker (see [`in_worker_pool`]), else the process's kept
/// pool (as many threads as rayon's default, named `deinsum-worker-{i}`), built again after a
/// fork. When no pool can be built, `f` runs on the calling thread with rayon's global pool.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if in_worker_pool() {
        return f();
    }
    match kept() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// `f` over `items`, results in their order: on the process's pool ([`install`]) when
/// `parallel`, else on the calling thread, which neither starts the pool nor hands work to
/// it (both cost more than small work: a 30-operand plan on 2 ranks took 5-10 ms the first
/// time, 3 ms after, of which the hand-offs were a fifth).
pub fn map_in_order<T: Sync, R: Send>(
    items: &[T],
    parallel: bool,
    f: impl Fn(&T) -> R + Sync + Send,
) -> Vec<R> {
    use rayon::prelude::*;
    if !parallel || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    install(|| items.par_iter().map(f).collect())
}

/// The kept pool of this process (`None` when it cannot be built).
fn kept() -> Option<Arc<Pool>> {
    static KEPT: Mutex<Option<ProcessPool>> = Mutex::new(None);
    let mut kept = lock(&KEPT);
    if let Some(pool) = kept.as_ref().and_then(ProcessPool::here) {
        return Some(pool.clone());
    }
    let pool = Arc::new(
        PoolBuilder::new(|i| format!("deinsum-worker-{i}"))
            .build()
            .ok()?,
    );
    *kept = Some(ProcessPool::new(pool.clone()));
    Some(pool)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mark_carrier;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_string()
    }

    #[test]
    fn builder_gives_the_threads_names_and_start_handler_asked() {
        let started = Arc::new(AtomicUsize::new(0));
        let seen = started.clone();
        let pool = PoolBuilder::new(|i| format!("test-pool-{i}"))
            .threads(3)
            .on_start(move |_| {
                seen.fetch_add(1, Ordering::SeqCst);
            })
            .build()
            .unwrap();
        assert_eq!(pool.current_num_threads(), 3);
        let mut names = pool.broadcast(|_| thread_name());
        names.sort();
        assert_eq!(names, ["test-pool-0", "test-pool-1", "test-pool-2"]);
        assert_eq!(started.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn dropping_a_pool_returns_after_its_threads_exit() {
        let pool = PoolBuilder::new(|i| format!("test-join-{i}"))
            .threads(4)
            .build()
            .unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let done = done.clone();
            // A thread exits only after its jobs: rayon's drop alone would return at once.
            pool.spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(200));
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(pool);
        assert_eq!(done.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn builder_defaults_to_rayons_thread_count() {
        let pool = PoolBuilder::new(|i| format!("test-default-{i}"))
            .build()
            .unwrap();
        let default = rayon::ThreadPoolBuilder::new().build().unwrap();
        assert_eq!(pool.current_num_threads(), default.current_num_threads());
    }

    #[test]
    fn map_in_order_keeps_the_order_serial_or_on_the_pool() {
        let items: Vec<usize> = (0..100).collect();
        let serial = map_in_order(&items, false, |&i| (i * 3, thread_name()));
        let pooled = map_in_order(&items, true, |&i| (i * 3, thread_name()));
        let want: Vec<usize> = (0..100).map(|i| i * 3).collect();
        assert_eq!(serial.iter().map(|r| r.0).collect::<Vec<_>>(), want);
        assert_eq!(pooled.iter().map(|r| r.0).collect::<Vec<_>>(), want);
        // Serial work stays on the calling thread (the test's own, no pool worker).
        assert!(serial.iter().all(|r| !r.1.starts_with("deinsum-worker-")));
        assert!(pooled.iter().all(|r| r.1.starts_with("deinsum-worker-")));
    }

    #[test]
    fn install_runs_on_the_process_pool_outside_a_worker_pool() {
        assert!(install(thread_name).starts_with("deinsum-worker-"));
        // Inside a worker pool the work stays on that pool.
        let own = PoolBuilder::new(|i| format!("test-own-{i}"))
            .threads(1)
            .build()
            .unwrap();
        assert_eq!(own.install(|| install(thread_name)), "test-own-0");
        // A rank carrier's pool is not for splitting work over: it goes to the process pool.
        let carrier = PoolBuilder::new(|i| format!("test-carrier-{i}"))
            .threads(1)
            .on_start(|_| mark_carrier())
            .build()
            .unwrap();
        assert!(carrier
            .install(|| install(thread_name))
            .starts_with("deinsum-worker-"));
    }

    #[test]
    fn a_kept_pool_is_used_only_in_the_process_that_built_it() {
        let pool = Arc::new(
            PoolBuilder::new(|i| format!("test-kept-{i}"))
                .threads(1)
                .build()
                .unwrap(),
        );
        let here = ProcessPool::new(pool.clone());
        assert!(here.here().is_some_and(|p| Arc::ptr_eq(p, &pool)));
        drop(here);
        assert_eq!(Arc::strong_count(&pool), 1);
        // As a forked child sees its parent's pool (a real fork needs `unsafe` libc calls;
        // python/tests/test_fork.py forks a process that uses the pools): another process
        // built it, so it is not used, and dropping it forgets it rather than signal threads
        // that are not there.
        let parents = ProcessPool::built_by(pool.clone(), std::process::id().wrapping_add(1));
        assert!(parents.here().is_none());
        drop(parents);
        assert_eq!(Arc::strong_count(&pool), 2);
    }
}
