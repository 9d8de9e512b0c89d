//! A session's shared state: its ranks (in process or MPI), their options, open flag, plan cache, per-call stats and the
//! files its live arrays were loaded from. Arrays hold it weakly; [`super::Session`] strongly.

use super::ranks::Ranks;
use super::types::{EinsumStats, SessionError};
use crate::{Einsum, Options};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The state behind a session and its arrays.
pub(crate) struct Inner {
    pub(super) id: u64,
    /// Where the ranks are.
    pub(crate) ranks: Ranks,
    pub(super) options: Options,
    open: AtomicBool,
    pub(super) next_array: AtomicU64,
    /// Threads each rank computes with.
    threads: AtomicUsize,
    plans: Mutex<HashMap<String, Arc<Einsum>>>,
    stats: Mutex<Vec<EinsumStats>>,
    /// Files live arrays were loaded from, with how many such arrays are alive.
    pub(super) sources: Mutex<HashMap<PathBuf, usize>>,
}

/// Numbers sessions, so that an array names the one it belongs to.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

impl Inner {
    /// A new open session's state on `ranks`, planning with `options` (for
    /// `ranks.procs()` ranks).
    pub(super) fn new(options: Options, ranks: Ranks) -> Inner {
        Inner {
            id: SESSIONS.fetch_add(1, Ordering::Relaxed),
            ranks,
            options,
            open: AtomicBool::new(true),
            next_array: AtomicU64::new(0),
            threads: AtomicUsize::new(1),
            plans: Mutex::new(HashMap::new()),
            stats: Mutex::new(Vec::new()),
            sources: Mutex::new(HashMap::new()),
        }
    }

    /// Threads each rank computes with.
    pub(super) fn threads(&self) -> usize {
        self.threads.load(Ordering::Relaxed)
    }

    /// Sets the threads each rank computes with (at least 1).
    pub(super) fn set_threads(&self, threads: usize) {
        self.threads.store(threads.max(1), Ordering::Relaxed);
    }

    /// Whether the session is open.
    pub(super) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Closes the session: its plans are dropped, and its arrays refuse use.
    pub(super) fn close(&self) {
        self.open.store(false, Ordering::Release);
        deinsum_runtime::lock(&self.plans).clear();
    }

    /// Refuses `what` once the session is closed.
    pub(super) fn check_open(&self, what: &str) -> Result<(), SessionError> {
        if self.is_open() {
            Ok(())
        } else {
            Err(SessionError::Closed { what: what.into() })
        }
    }

    /// One record per einsum call, in call order.
    pub(super) fn stats(&self) -> Vec<EinsumStats> {
        deinsum_runtime::lock(&self.stats).clone()
    }

    /// Whether a live array was loaded from `path`.
    pub(super) fn loaded_from(&self, path: &Path) -> bool {
        deinsum_runtime::lock(&self.sources)
            .get(path)
            .is_some_and(|&n| n > 0)
    }

    /// The compiled plan for `key`, from the cache or built by `build`; true when cached.
    pub(super) fn plan(
        &self,
        key: String,
        build: impl FnOnce() -> Result<Einsum, crate::Error>,
    ) -> Result<(Arc<Einsum>, bool), SessionError> {
        if let Some(e) = deinsum_runtime::lock(&self.plans).get(&key) {
            return Ok((e.clone(), true));
        }
        let e = Arc::new(build()?);
        deinsum_runtime::lock(&self.plans).insert(key, e.clone());
        Ok((e, false))
    }

    /// Records one einsum call.
    pub(super) fn record(&self, s: EinsumStats) {
        deinsum_runtime::lock(&self.stats).push(s);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Release);
    }
}
