//! Keeps the machine's other cores awake for a short while after an in-process run, as
//! OpenBLAS's workers do after a call: threads of the idle scheduling class spin (yielding)
//! on cores that would otherwise go idle, so that the next run's rank threads start on awake
//! cores. They nap while a run is going on (spinning then made the MTTKRP from Python 1.3-1.5x
//! slower) and leave when the window closes.
//!
//! Why: in a virtual machine an idle core halts and its host deschedules it; waking it takes
//! hundreds of microseconds there. From Python, the 5-operand chain at 64 on 2 ranks took
//! 0.85-0.9 ms a call when calls followed each other, but 1.1-1.4 ms for the next 30 calls
//! after a 0.3 s pause; python/bench.py (a pause before each contestant's timed calls):
//! 1.01-1.02 ms with the lingering threads, 1.08-1.31 ms without, the other kernels unchanged.
//!
//! `DEINSUM_LINGER_MS` sets the window (default [`DEFAULT_LINGER_MS`]; 0 turns it off).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Milliseconds the other cores are kept awake after a run, unless `DEINSUM_LINGER_MS` says.
pub const DEFAULT_LINGER_MS: u64 = 20;

/// The process's time origin, against which [`UNTIL`] counts.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// The lingering threads' shared state: until when they spin and how many are alive.
pub struct Linger {
    /// Nanoseconds since [`epoch`] at which the window closes.
    until: AtomicU64,
    /// Lingering threads alive.
    running: AtomicUsize,
}

/// In-process runs going on (the lingering threads sleep meanwhile).
pub static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// The process's lingering threads.
static GLOBAL: Linger = Linger::new();

/// The window: `DEINSUM_LINGER_MS` when it is a number, else the default (read once).
pub fn window() -> Duration {
    static W: OnceLock<Duration> = OnceLock::new();
    *W.get_or_init(|| {
        let ms = std::env::var("DEINSUM_LINGER_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_LINGER_MS);
        Duration::from_millis(ms)
    })
}

/// Keeps `threads` other cores awake for [`window`] from now (the process's lingering
/// threads).
pub fn linger(threads: usize) {
    GLOBAL.linger(threads, window());
}

impl Linger {
    /// No window open, no thread alive.
    pub const fn new() -> Self {
        Linger {
            until: AtomicU64::new(0),
            running: AtomicUsize::new(0),
        }
    }

    /// Lingering threads alive (what the tests watch).
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Opens (or extends) the window to `w` from now and starts the threads missing to make
    /// `threads` (detached; each leaves when the window closes). A thread that cannot be
    /// started is left out: lingering only saves time.
    pub fn linger(&'static self, threads: usize, w: Duration) {
        if w.is_zero() || threads == 0 {
            return;
        }
        self.until
            .fetch_max(now_ns() + w.as_nanos() as u64, Ordering::AcqRel);
        while let Some(n) = self.claim(threads) {
            let started = std::thread::Builder::new()
                .name(format!("deinsum-linger-{n}"))
                .spawn(move || self.run(threads));
            if started.is_err() {
                self.running.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
    }

    /// Counts one more thread if fewer than `threads` are alive; the count before.
    fn claim(&self, threads: usize) -> Option<usize> {
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < threads).then_some(n + 1)
            })
            .ok()
    }

    /// A lingering thread's life: at the lowest priority, spin (yielding) until the window
    /// closes; stay on when a run reopened it just as this thread was leaving.
    fn run(&self, threads: usize) {
        // At a normal priority the spin would take time from the work it is meant to serve.
        if !lower_priority() {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        loop {
            while now_ns() < self.until.load(Ordering::Acquire) {
                if ACTIVE.load(Ordering::Acquire) > 0 {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                std::thread::yield_now();
            }
            self.running.fetch_sub(1, Ordering::AcqRel);
            if now_ns() >= self.until.load(Ordering::Acquire) || self.claim(threads).is_none() {
                return;
            }
        }
    }
}

/// Puts the calling thread in the idle scheduling class where there is one (Linux: a core
/// running only such threads counts as idle when a woken thread is placed, so a rank thread
/// starts on it at once; at niceness 19 the ranks' threads were placed beside each other and
/// the MTTKRP from Python ran 1.5x slower), else at the lowest priority; whether it could.
fn lower_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadSchedulePolicy,
        };
        set_thread_priority_and_policy(
            thread_native_id(),
            thread_priority::ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        )
        .is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min).is_ok()
    }
}

impl Default for Linger {
    fn default() -> Self {
        Linger::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lingering_threads_stay_for_the_window_then_leave() {
        let l: &'static Linger = Box::leak(Box::new(Linger::new()));
        let start = Instant::now();
        l.linger(2, Duration::from_millis(30));
        assert_eq!(l.running(), 2, "both threads counted when started");
        // A second call within the window starts no third thread.
        l.linger(2, Duration::from_millis(30));
        assert!(l.running() <= 2);
        while l.running() > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "lingering threads still running"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // None left before the window closed (unless its priority could not be lowered).
        assert!(start.elapsed() >= Duration::from_millis(30) || !lowered());
    }

    #[test]
    fn a_zero_window_starts_nothing() {
        let l: &'static Linger = Box::leak(Box::new(Linger::new()));
        l.linger(3, Duration::ZERO);
        assert_eq!(l.running(), 0);
    }

    /// Whether this system lets a thread lower its priority.
    fn lowered() -> bool {
        std::thread::spawn(lower_priority).join().unwrap_or(false)
    }
}
