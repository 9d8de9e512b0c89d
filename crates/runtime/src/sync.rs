//! Locks that outlive a panic.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering from poisoning: deinsum's locks guard state that no panic leaves half
/// written (a rank that panics is reported by its world; the others must still get in).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::lock;
    use std::sync::{Arc, Mutex};

    #[test]
    fn lock_survives_a_poisoned_mutex() {
        let m = Arc::new(Mutex::new(7));
        let held = m.clone();
        let panicked = std::thread::spawn(move || {
            let mut g = held.lock().unwrap();
            *g = 8;
            panic!("poison the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(m.is_poisoned());
        let mut g = lock(&m);
        assert_eq!(*g, 8);
        *g = 9;
        drop(g);
        assert_eq!(*lock(&m), 9);
    }
}
