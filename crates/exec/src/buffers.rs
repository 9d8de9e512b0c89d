//! A rank's context for its kernels: its free buffers (kept for reuse) and its thread pool.
//!
//! Large fresh allocations come from the kernel as untouched pages, and the first write to each
//! page is a page fault that clears it: for a 32 MB block that costs more than copying the data
//! in. A run that is repeated (`--repeat`) allocates the same blocks and messages every time,
//! so the executor hands freed buffers to the rank's free list ([`give`]) and takes them back
//! ([`take`], [`take_empty`]) instead of asking the allocator again. The free list holds at
//! most the words it is given as capacity ([`enter`]), so a rank never keeps more than that in
//! free buffers; outside [`enter`] it is off and every call allocates as `vec!` does.
//!
//! The same context carries the rank's rayon pool, so that box copies on the rank's own thread
//! ([`crate::data`]) can split over the rank's threads ([`on_rank_pool`]).

use deinsum_runtime::{lock, Pool, PoolBuilder, ProcessPool};
use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Buffers of below this many words are not kept: the allocator serves them from its own
/// free lists without page faults.
const MIN_POOLED: usize = 1 << 14;

/// Free buffers by element type, and their total capacity in words.
#[derive(Default)]
struct Free {
    by_type: HashMap<TypeId, Box<dyn Any + Send>>,
    words: usize,
    cap_words: usize,
}

impl Free {
    fn list<T: Send + 'static>(&mut self) -> &mut Vec<Vec<T>> {
        self.by_type
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(Vec::<Vec<T>>::new()))
            .downcast_mut::<Vec<Vec<T>>>()
            .expect("list of its own type")
    }

    /// The smallest free buffer of at least `len` and at most `len + len / 4` words (a tight
    /// fit: a small request taking a large block would leave the block's next user without).
    fn take<T: Send + 'static>(&mut self, len: usize) -> Option<Vec<T>> {
        let list = self.list::<T>();
        let i = list
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len && v.capacity() <= len + len / 4)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i)?;
        let v = list.swap_remove(i);
        self.words -= v.capacity();
        Some(v)
    }

    fn give<T: Send + 'static>(&mut self, v: Vec<T>) {
        let c = v.capacity();
        if c < MIN_POOLED || self.words + c > self.cap_words {
            return;
        }
        self.words += c;
        self.list::<T>().push(v);
    }

    /// Sets the capacity to `cap_words`; the free buffers are dropped when they exceed it (a
    /// run of a smaller plan after a larger one).
    fn set_cap(&mut self, cap_words: usize) {
        self.cap_words = cap_words;
        if self.words > cap_words {
            self.by_type.clear();
            self.words = 0;
        }
    }
}

/// Free buffers kept from one run to the next, one list per rank number: a run given them
/// ([`crate::ExecOptions::kept`]) takes its blocks, messages and intermediates from the pages
/// the previous run left (no first-touch page faults) and leaves its own freed buffers there,
/// at most its plan's predicted peak per rank (with message buffers). Each rank number's
/// thread pool (for more than one thread per rank) is kept too and serves the next run with as
/// many threads: building a pool per call cost its threads' start, and a pool built right after
/// another was dropped ran at about half speed for a while. Cloning shares the lists.
#[derive(Clone, Default)]
pub struct KeptBuffers {
    ranks: Arc<Mutex<Vec<Arc<Mutex<Free>>>>>,
    /// Per rank number, its last run's thread pool with its thread count.
    pools: Arc<Mutex<Vec<Option<KeptPool>>>>,
}

/// A rank's kept thread pool and its thread count.
type KeptPool = (usize, ProcessPool);

impl std::fmt::Debug for KeptBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeptBuffers({} words)", self.words())
    }
}

impl KeptBuffers {
    /// No buffers kept yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The free list of rank `me`, its capacity set to `cap_words` (a smaller one than the
    /// last run's drops what exceeds it).
    fn rank(&self, me: usize, cap_words: usize) -> Arc<Mutex<Free>> {
        let free = self.list(me);
        lock(&free).set_cap(cap_words);
        free
    }

    /// The free list of rank `me` (made empty, with no capacity, if it has none yet).
    fn list(&self, me: usize) -> Arc<Mutex<Free>> {
        let mut ranks = lock(&self.ranks);
        while ranks.len() <= me {
            ranks.push(Arc::default());
        }
        ranks[me].clone()
    }

    /// Words of free buffers kept, over every rank.
    pub fn words(&self) -> usize {
        let ranks = lock(&self.ranks);
        ranks.iter().map(|f| lock(f).words).sum()
    }

    /// Keeps buffer `v` in rank `me`'s list (within its capacity; dropped otherwise): a buffer
    /// the caller had from that rank's run, such as its part of the output once assembled.
    pub fn give<T: Send + 'static>(&self, me: usize, v: Vec<T>) {
        let ranks = lock(&self.ranks);
        if let Some(free) = ranks.get(me) {
            lock(free).give(v);
        }
    }

    /// Frees the lists and thread pools of ranks `procs` and above (a run on fewer ranks
    /// than the last).
    pub fn keep_ranks(&self, procs: usize) {
        lock(&self.ranks).truncate(procs);
        lock(&self.pools).truncate(procs);
    }

    /// Frees every kept buffer and ends the kept thread pools.
    pub fn clear(&self) {
        lock(&self.ranks).clear();
        lock(&self.pools).clear();
    }

    /// Thread pools kept (one per rank number that ran with more than one thread).
    pub fn pools(&self) -> usize {
        lock(&self.pools).iter().flatten().count()
    }
}

/// One rank's context: its free buffers and its thread pool.
#[derive(Clone, Default)]
pub struct RankContext {
    free: Arc<Mutex<Free>>,
    threads: Option<Arc<Pool>>,
}

thread_local! {
    static CONTEXT: RefCell<Option<RankContext>> = const { RefCell::new(None) };
}

impl RankContext {
    /// The context of rank `me`: a free list that keeps at most `cap_words` words of free buffers
    /// (0: no pooling) and, for `threads > 1`, a rayon pool of that many workers, which share
    /// the rank's free buffers.
    pub fn new(
        cap_words: usize,
        threads: usize,
        me: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let free = Arc::new(Mutex::new(Free {
            cap_words,
            ..Free::default()
        }));
        Self::with_free(free, threads, me)
    }

    /// [`RankContext::new`] on rank `me`'s list of `kept` buffers (at most `cap_words`), which
    /// outlives the context, and on the thread pool rank `me` kept from its last run when it
    /// has `threads` threads (else a new one, kept for the next run).
    pub fn kept(
        kept: &KeptBuffers,
        cap_words: usize,
        threads: usize,
        me: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let free = kept.rank(me, cap_words);
        if threads <= 1 {
            return Self::with_free(free, threads, me);
        }
        let reused = lock(&kept.pools).get(me).and_then(|p| {
            p.as_ref()
                .filter(|(n, _)| *n == threads)
                .and_then(|p| p.1.here().cloned())
        });
        if let Some(pool) = reused {
            // Its workers hold this rank's list: the one `free` is (until `clear` or
            // `keep_ranks` drops both).
            return Ok(RankContext {
                free,
                threads: Some(pool),
            });
        }
        let ctx = Self::with_free(free, threads, me)?;
        let mut pools = lock(&kept.pools);
        while pools.len() <= me {
            pools.push(None);
        }
        pools[me] = ctx.threads.clone().map(|p| (threads, ProcessPool::new(p)));
        Ok(ctx)
    }

    /// [`RankContext::new`] on rank `me`'s list of `kept` buffers as it is (its capacity is
    /// left for the run to set): for work that only takes buffers, such as cutting input blocks
    /// ahead of a run given the same list.
    pub fn kept_as_is(
        kept: &KeptBuffers,
        threads: usize,
        me: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        Self::with_free(kept.list(me), threads, me)
    }

    fn with_free(
        free: Arc<Mutex<Free>>,
        threads: usize,
        me: usize,
    ) -> Result<Self, rayon::ThreadPoolBuildError> {
        let threads = if threads > 1 {
            // The workers get the buffers only: a worker holding the pool would keep it alive.
            let worker = RankContext {
                free: free.clone(),
                threads: None,
            };
            let pool = PoolBuilder::new(move |i| format!("deinsum-rank-{me}-worker-{i}"))
                .threads(threads)
                .on_start(move |_| worker.attach())
                .build()?;
            Some(Arc::new(pool))
        } else {
            None
        };
        Ok(RankContext { free, threads })
    }

    /// The rank's thread pool, when it has more than one thread.
    pub fn thread_pool(&self) -> Option<&rayon::ThreadPool> {
        self.threads.as_deref().map(|p| &**p)
    }

    /// Makes this the context of the calling thread (the rank's own) until the guard drops.
    pub fn enter(&self) -> ContextGuard {
        let prev = CONTEXT.with(|c| c.replace(Some(self.clone())));
        ContextGuard { prev }
    }

    fn attach(&self) {
        CONTEXT.with(|c| *c.borrow_mut() = Some(self.clone()));
    }
}

/// Restores the thread's previous context (and drops the free buffers with the last user).
pub struct ContextGuard {
    prev: Option<RankContext>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        CONTEXT.with(|c| *c.borrow_mut() = prev);
    }
}

fn with_free<R>(f: impl FnOnce(&mut Free) -> R) -> Option<R> {
    CONTEXT.with(|c| c.borrow().as_ref().map(|ctx| f(&mut lock(&ctx.free))))
}

/// The allocator refused a tensor-sized buffer (or its size does not fit the address space).
///
/// Every buffer whose length is a count of tensor elements (blocks, messages, intermediates,
/// the run lists of box copies) is allocated through this module or [`try_vec`], so that a
/// failure is an error and not an abort. Bookkeeping whose length is a count of indices, grid
/// dimensions, ranks or transfers is allocated as usual: it is not what exhausts a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate {} ({bytes} bytes): out of memory", crate::preflight::human(*.bytes))]
pub struct OutOfMemory {
    /// The bytes asked for.
    pub bytes: u128,
    /// The tensor (plan tensor id, a tree node) the buffer was for, when the code that asked
    /// knew it; the executor otherwise names the step's tensor.
    pub tensor: Option<usize>,
}

impl OutOfMemory {
    /// The failure of a buffer of `len` elements of `T`.
    pub fn of<T>(len: usize) -> Self {
        OutOfMemory {
            bytes: len as u128 * std::mem::size_of::<T>() as u128,
            tensor: None,
        }
    }

    /// The same failure, naming `tensor` unless a more precise one is named already.
    pub fn for_tensor(self, tensor: usize) -> Self {
        OutOfMemory {
            tensor: self.tensor.or(Some(tensor)),
            ..self
        }
    }
}

/// An empty vector with room for exactly `cap` elements, or the allocator's refusal.
pub fn try_vec<T>(cap: usize) -> Result<Vec<T>, OutOfMemory> {
    let mut v = Vec::new();
    v.try_reserve_exact(cap)
        .map_err(|_| OutOfMemory::of::<T>(cap))?;
    Ok(v)
}

/// A copy of `src` in a fallibly allocated vector.
pub(crate) fn try_copy<T: Copy>(src: &[T]) -> Result<Vec<T>, OutOfMemory> {
    let mut v = try_vec(src.len())?;
    v.extend_from_slice(src);
    Ok(v)
}

/// A fresh vector of `len` zeros, from the allocator's zeroed memory (bytemuck's fallible
/// `alloc_zeroed`): large ones come as untouched zero pages, so nothing is written twice and
/// the first touch of each page stays with the kernel that fills it, as `vec!` would do it.
fn fresh<T: bytemuck::Zeroable>(len: usize) -> Result<Vec<T>, OutOfMemory> {
    bytemuck::allocation::try_zeroed_vec(len).map_err(|()| OutOfMemory::of::<T>(len))
}

/// A buffer of `len` zeros, from the free list when it has one that fits.
pub fn take<T: bytemuck::Zeroable + Copy + Default + Send + 'static>(
    len: usize,
) -> Result<Vec<T>, OutOfMemory> {
    match take_any::<T>(len) {
        Some(mut v) => {
            v.fill(T::default());
            Ok(v)
        }
        None => fresh(len),
    }
}

/// A buffer of `len` elements whose values the caller overwrites entirely (stale values from
/// the free list, or zeros from a fresh allocation).
pub fn take_overwritten<T: bytemuck::Zeroable + Copy + Default + Send + 'static>(
    len: usize,
) -> Result<Vec<T>, OutOfMemory> {
    match take_any::<T>(len) {
        Some(v) => Ok(v),
        None => fresh(len),
    }
}

fn take_any<T: Copy + Default + Send + 'static>(len: usize) -> Option<Vec<T>> {
    if len < MIN_POOLED {
        return None;
    }
    let mut v = with_free(|f| f.take::<T>(len)).flatten()?;
    // Within the capacity: no reallocation, the pages are already there.
    v.resize(len, T::default());
    v.truncate(len);
    Some(v)
}

/// An empty buffer with room for `cap` elements, from the free list when it has one that fits.
pub fn take_empty<T: Copy + Default + Send + 'static>(cap: usize) -> Result<Vec<T>, OutOfMemory> {
    if cap < MIN_POOLED {
        return try_vec(cap);
    }
    match with_free(|f| f.take::<T>(cap)).flatten() {
        Some(mut v) => {
            v.clear();
            Ok(v)
        }
        None => try_vec(cap),
    }
}

/// Hands a buffer no longer needed to the free list (dropped when it is off or full).
pub fn give<T: Send + 'static>(v: Vec<T>) {
    if v.capacity() < MIN_POOLED {
        return;
    }
    with_free(|f| f.give(v));
}

/// Threads of the rank's pool (1 when the calling thread has no rank context with a pool).
pub fn rank_threads() -> usize {
    CONTEXT.with(|c| {
        c.borrow()
            .as_ref()
            .and_then(|ctx| ctx.threads.as_ref().map(|p| p.current_num_threads()))
            .unwrap_or(1)
    })
}

/// Runs `f` on the rank's thread pool when the calling thread is a rank's own thread with a
/// pool (the box copies of a move run there), else on the calling thread.
pub(crate) fn on_rank_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let pool = CONTEXT.with(|c| c.borrow().as_ref().and_then(|ctx| ctx.threads.clone()));
    match pool {
        Some(p) if !deinsum_runtime::in_worker_pool() => p.install(f),
        _ => f(),
    }
}

/// A rank's free list, held by a buffer that may be dropped on another rank's thread: a block
/// that in-process ranks share goes back to the free list of the rank that allocated it, so that
/// rank finds it again on the next run.
#[derive(Clone, Default)]
pub(crate) struct Home(Option<Arc<Mutex<Free>>>);

impl Home {
    /// The calling thread's rank free list (none outside a rank context).
    pub(crate) fn here() -> Self {
        Home(CONTEXT.with(|c| c.borrow().as_ref().map(|ctx| ctx.free.clone())))
    }

    /// Hands `v` to this free list, as [`give`] does to the calling rank's.
    pub(crate) fn give<T: Send + 'static>(&self, v: Vec<T>) {
        if let Some(free) = &self.0 {
            if v.capacity() >= MIN_POOLED {
                lock(free).give(v);
            }
        }
    }
}
