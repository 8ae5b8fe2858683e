//! Locks that survive a panic.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, also after a thread panicked while holding it.
///
/// pvedeck's locks guard plain data that stays consistent field by field
/// (a map, a counter, a cached answer): serving it on is better than
/// turning one panic into a failure of every later request.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The value inside `m`, also after a panic while it was held.
pub fn into_inner<T>(m: Mutex<T>) -> T {
    m.into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_serves_its_value() {
        let m = std::sync::Arc::new(Mutex::new(5));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 6);
        let m = std::sync::Arc::try_unwrap(m).expect("one owner");
        assert_eq!(into_inner(m), 6);
    }
}
