//! How many threads a kernel may use, and the work below which it uses one: the leaf every
//! kernel, copy and GEMM asks before splitting work.

/// Threads the current kernel may use: those of the rank's rayon pool when running inside one
/// (the executor installs a pool of [`crate::ExecOptions::threads`] threads around compute
/// steps), else 1.
pub fn threads() -> usize {
    if deinsum_runtime::in_worker_pool() {
        rayon::current_num_threads()
    } else {
        1
    }
}

/// Below this many multiply-adds a GEMM runs on one thread (splitting costs more than it saves).
const PAR_MIN_MADDS: usize = 1 << 18;

/// Threads for an `m x n x k` product under [`threads`]: one below [`PAR_MIN_MADDS`], else
/// as many as give each at least that much work.
pub(crate) fn gemm_threads(m: usize, n: usize, k: usize) -> usize {
    let work = m.saturating_mul(n).saturating_mul(k);
    threads().min(work / PAR_MIN_MADDS).max(1)
}

/// Below this many output words a product or copy runs on one thread.
pub(crate) const PAR_MIN_WORDS: usize = 1 << 16;
