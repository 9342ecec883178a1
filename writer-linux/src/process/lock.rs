//! The lock around the process's one publication (`publisher.rs`): a spin lock, so that
//! the writer needs no `std`.
//!
//! It is held for one operation on the publication at a time (encode, a few stores, a few
//! system calls), never while code from outside this module runs, so a waiter spins only
//! briefly and then yields the CPU until the lock is free.
//!
//! A fork while another thread holds it leaves it held in the child, as with any mutex:
//! the child's calls on the process context would then wait forever.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering};

/// Attempts before a waiter starts yielding the CPU to the holder.
const SPINS: u32 = 64;

/// A value that one thread at a time reaches, through [`Lock::lock`].
pub(crate) struct Lock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `Guard`, and `lock` hands out one guard at a
// time: the value moves between threads (hence `T: Send`) but two never share it.
unsafe impl<T: Send> Sync for Lock<T> {}

impl<T> Lock<T> {
    /// A lock, not held, around `value`.
    pub(crate) const fn new(value: T) -> Self {
        Self {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Waits until no other guard exists, and returns the one guard.
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        let mut attempts = 0;
        // Acquire on success: pairs with the Release store of the previous guard's drop, so
        // everything the previous holder wrote to the value happens before this holder
        // reads it. A failed attempt reads nothing of the value: Relaxed.
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if attempts < SPINS {
                attempts += 1;
                core::hint::spin_loop();
            } else {
                rustix::thread::sched_yield();
            }
        }
        Guard { lock: self }
    }
}

/// The one way to the value while the lock is held; dropping it releases the lock.
pub(crate) struct Guard<'a, T> {
    lock: &'a Lock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Lock::lock`), so nothing else refers to
        // the value while the returned borrow of the guard lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and the borrow of the guard is exclusive.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // Release: orders this holder's writes to the value before the next holder's
        // Acquire in `lock`.
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::Lock;
    use std::vec::Vec;

    #[test]
    fn one_holder_at_a_time() {
        static COUNTER: Lock<(u64, u64)> = Lock::new((0, 0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..10_000 {
                        let mut pair = COUNTER.lock();
                        // Two plain writes a second holder would tear apart.
                        pair.0 += 1;
                        pair.1 = pair.0;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(*COUNTER.lock(), (40_000, 40_000));
    }
}
