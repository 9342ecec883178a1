//! Thread exit with a context attached (feature `std`): the slot is set to NULL, then the
//! record is freed. A record another library attached is left in the slot: it is not this
//! crate's to free (its owner's own exit hook may still look for it there).

use std::thread_local;

/// A thread-local value whose destructor detaches and frees the thread's context.
struct DetachOnExit;

impl Drop for DetachOnExit {
    fn drop(&mut self) {
        // `detach` stores NULL in the slot before the record is freed (the returned context
        // drops after the store), so a reader never follows the slot to freed memory. It
        // takes only a context of this crate: another library's record stays.
        drop(super::detach());
    }
}

thread_local! {
    static DETACH_ON_EXIT: DetachOnExit = const { DetachOnExit };
}

/// Registers the exit hook of the calling thread; called when a context gets attached to a
/// thread that had none, so detach-then-attach cycles pay one thread-local access.
///
/// During the thread's own thread-local destruction the hook may already be gone: a
/// context attached then is never freed (it is not reachable from freed memory either).
#[inline]
pub(super) fn arm() {
    let _ = DETACH_ON_EXIT.try_with(|_| ());
}
