//! What a run's threads reserve, checked before they start: a Rust allocation that fails
//! aborts the process (the interpreter with it), so a run whose threads would not fit this
//! process's limits (`ulimit -v`, `ulimit -u`, kernel.threads-max) is refused with a
//! `MemoryError` instead of being started. Uses no other module of the crate.

use pyo3::exceptions::PyMemoryError;
use pyo3::PyResult;

/// Virtual memory one thread of a run may reserve: its stack (Rust's and rayon's 2 MiB, with
/// its guard page) and the allocator's share (mimalloc gives each thread that allocates its
/// own pages out of 32 MiB reservations). Measured from Python: procs=1000 on a 256 x 256
/// product grew the process's VmSize by 32 GiB, 33 MiB a thread (the issue saw 37.9 GB).
const THREAD_RESERVE_BYTES: u128 = 40 << 20;

/// A limit of `/proc/self/limits` (the soft one), `None` when unlimited or unknown.
fn soft_limit(name: &str) -> Option<u128> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// A `Key: value` figure of `/proc/self/status` (`VmSize` in kB, `Threads`).
fn status(key: &str) -> Option<u128> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Threads a run of `procs` in-process ranks with `threads` each starts: a rank of one thread
/// is its own thread, a rank of more keeps a pool of `threads` besides.
pub fn run_threads(procs: usize, threads: usize) -> u128 {
    let procs = procs as u128;
    if threads <= 1 {
        procs
    } else {
        procs * (threads as u128 + 1)
    }
}

/// Refuses a run of `procs` ranks of `threads` threads that this process cannot start: more
/// threads than its limits allow, or stacks and allocator reservations beyond its address
/// space limit. Where a limit is unknown (no `/proc`), nothing is refused.
pub fn check_threads(procs: usize, threads: usize) -> PyResult<()> {
    let want = run_threads(procs, threads);
    let running = status("Threads").unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .ok()
        .and_then(|s| s.trim().parse::<u128>().ok());
    let most = [soft_limit("Max processes"), kernel]
        .into_iter()
        .flatten()
        .min();
    if let Some(most) = most {
        if running + want > most {
            return Err(PyMemoryError::new_err(format!(
                "procs={procs} with threads={threads} start {want} threads, and this process \
                 may have at most {most} (ulimit -u, kernel.threads-max; {running} running): \
                 use fewer procs or threads"
            )));
        }
    }
    if let (Some(limit), Some(size_kb)) = (soft_limit("Max address space"), status("VmSize")) {
        let need = want * THREAD_RESERVE_BYTES;
        let free = limit.saturating_sub(size_kb * 1024);
        if need > free {
            return Err(PyMemoryError::new_err(format!(
                "procs={procs} with threads={threads} start {want} threads, whose stacks and \
                 allocator reservations take about {} GiB of address space; this process may \
                 reserve {} GiB more (ulimit -v): use fewer procs or threads",
                need >> 30,
                free >> 30
            )));
        }
    }
    Ok(())
}
