//! The extension's allocator (mimalloc), and what bounds the address space it keeps reserved
//! once the threads of a call of more threads than cores are gone. Uses no other module of the
//! crate.

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};
use std::ffi::c_long;
use std::sync::Mutex;

/// The extension's own allocator (see Cargo.toml): arrays it hands to NumPy are freed through
/// it too, by the Rust owner rust-numpy keeps for them.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc.h's (v2) `mi_option_arena_reserve` (KiB), which libmimalloc-sys does not name.
const ARENA_RESERVE: mi_option_t = 23;
/// mimalloc.h's (v2) `mi_option_abandoned_reclaim_on_free`.
const ABANDONED_RECLAIM_ON_FREE: mi_option_t = 26;

/// Lets a free into the segment of an exited thread reclaim it, so that the segment goes back
/// to its arena or the OS with its last block (else it stays until another thread happens to
/// reclaim it). Left as it is when the user set it through its environment variable.
pub fn init() {
    if std::env::var_os("MIMALLOC_ABANDONED_RECLAIM_ON_FREE").is_none() {
        // SAFETY: FFI call with plain integers; mimalloc allows setting options at any time.
        unsafe { mi_option_set(ABANDONED_RECLAIM_ON_FREE, 1) }
    }
}

/// Calls in progress that hold a [`NoNewArenas`], and the arena size to restore after them.
static NO_NEW_ARENAS: Mutex<(usize, c_long)> = Mutex::new((0, 0));

/// While alive, mimalloc reserves no new arena: each thread that allocates takes a 32 MiB
/// segment, and beyond the arenas already reserved those come from the OS and are unmapped
/// when freed, whereas new arenas (1 GiB each) are never unmapped (procs=1000 left 33 GiB of
/// address space reserved for the rest of the process). Held by calls of more threads than
/// cores; other calls keep reusing the arenas as before (a large output's pages stay mapped).
pub struct NoNewArenas(());

impl NoNewArenas {
    /// Stops new arenas until every holder is dropped.
    pub fn hold() -> Self {
        let mut held = NO_NEW_ARENAS.lock().unwrap_or_else(|p| p.into_inner());
        if held.0 == 0 {
            // SAFETY: FFI calls with plain integers; mimalloc reads this option per reservation.
            held.1 = unsafe { mi_option_get(ARENA_RESERVE) };
            unsafe { mi_option_set(ARENA_RESERVE, 0) }
        }
        held.0 += 1;
        NoNewArenas(())
    }
}

impl Drop for NoNewArenas {
    fn drop(&mut self) {
        let mut held = NO_NEW_ARENAS.lock().unwrap_or_else(|p| p.into_inner());
        held.0 -= 1;
        if held.0 == 0 {
            // SAFETY: FFI call with plain integers.
            unsafe { mi_option_set(ARENA_RESERVE, held.1) }
        }
    }
}
