//! `WithThreadContext`: the slot's record before, during and after each poll, on the
//! threads that poll it, nested, panicking and dropped half-way, read the way a reader
//! reads it (the pointer in the slot, then `RecordView::parse`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::thread as std_thread;

use otel_ctx_writer::thread::{
    self, attached_record_address, Key, ThreadContext, ThreadContextExt,
};

mod thread_support;
use thread_support::own_record;

const ROUTE: Key = Key::from_index(0);

/// What a reader would see on the calling thread now: `None` for a NULL slot, else the
/// trace id's first byte, the span id's first byte and the attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    trace: u8,
    span: u8,
    attrs: Vec<(u8, String)>,
}

fn seen() -> Option<Seen> {
    own_record().map(|record| Seen {
        trace: record.trace_id[0],
        span: record.span_id[0],
        attrs: record.attrs,
    })
}

fn context(id: u8, route: &str) -> ThreadContext {
    ThreadContext::new([id; 16], [id; 8], 0x01, &[(ROUTE, route)]).unwrap()
}

fn expect(id: u8, route: &str) -> Option<Seen> {
    Some(Seen {
        trace: id,
        span: id,
        attrs: vec![(0, route.to_owned())],
    })
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// Polls to completion on the calling thread (every future here wakes itself).
fn block_on<F: Future + Unpin>(mut future: F) -> F::Output {
    loop {
        if let Poll::Ready(output) = poll_once(&mut future) {
            return output;
        }
    }
}

/// Records what the slot holds at each of its polls, and finishes after `steps` polls.
struct Steps {
    steps: usize,
    log: Vec<Option<Seen>>,
}

impl Future for Steps {
    type Output = Vec<Option<Seen>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.log.push(seen());
        if self.log.len() == self.steps {
            Poll::Ready(std::mem::take(&mut self.log))
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

fn steps(steps: usize) -> Steps {
    Steps {
        steps,
        log: Vec::new(),
    }
}

/// Pending once, then ready.
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[test]
fn attached_only_while_polled_and_the_previous_record_is_put_back() {
    std_thread::spawn(|| {
        assert_eq!(seen(), None);
        let mut task = steps(2).with_thread_context(context(7, "/task"));
        assert_eq!(seen(), None, "making the wrapper attaches nothing");
        assert!(poll_once(&mut task).is_pending());
        assert_eq!(seen(), None, "after a poll: NULL again");

        // The worker has a context of its own: it is what comes back after the poll.
        let _worker = context(1, "/worker").attach_scoped();
        let address = attached_record_address();
        let Poll::Ready(log) = poll_once(&mut task) else {
            panic!("two steps")
        };
        assert_eq!(log, vec![expect(7, "/task"), expect(7, "/task")]);
        assert_eq!(seen(), expect(1, "/worker"));
        assert_eq!(attached_record_address(), address, "the very same record");
        assert!(task.context().is_some(), "the task got its context back");
    })
    .join()
    .unwrap();
}

#[test]
fn a_task_polled_on_different_threads_keeps_its_context() {
    let task = steps(3).with_thread_context(context(9, "/moving"));

    // Each step on a new thread, the way a multi-thread runtime moves a task; one of them
    // already holds a context of its own.
    let mut task = Some(task);
    let mut log = Vec::new();
    for worker in 0..3u8 {
        let mut moving = task.take().unwrap();
        let (moving, poll, after) = std_thread::spawn(move || {
            let own = (worker == 1).then(|| context(2, "/own").attach_scoped());
            let poll = poll_once(&mut moving);
            let after = seen();
            drop(own);
            (moving, poll, after)
        })
        .join()
        .unwrap();
        let expected_after = if worker == 1 { expect(2, "/own") } else { None };
        assert_eq!(
            after, expected_after,
            "worker {worker} gets its own slot back"
        );
        match poll {
            Poll::Ready(steps) => log = steps,
            Poll::Pending => task = Some(moving),
        }
    }
    assert_eq!(log, vec![expect(9, "/moving"); 3]);
}

#[test]
fn nested_wrappers_each_put_back_the_outer_context() {
    std_thread::spawn(|| {
        let inner = async {
            let first = seen();
            YieldOnce::default().await;
            (first, seen())
        }
        .with_thread_context(context(2, "/inner"));
        let outer = async move {
            let before = seen();
            let inner = inner.await;
            YieldOnce::default().await;
            (before, inner, seen())
        }
        .with_thread_context(context(1, "/outer"));

        let (before, (inner_first, inner_second), after) = block_on(outer);
        assert_eq!(before, expect(1, "/outer"));
        assert_eq!(inner_first, expect(2, "/inner"));
        assert_eq!(inner_second, expect(2, "/inner"));
        assert_eq!(after, expect(1, "/outer"));
        assert_eq!(seen(), None);
    })
    .join()
    .unwrap();
}

#[test]
fn updates_made_during_a_poll_last_to_the_next_poll() {
    std_thread::spawn(|| {
        let task = async {
            thread::update([5; 16], [5; 8], 0x01, &[(ROUTE, "/updated")]).unwrap();
            YieldOnce::default().await;
            seen()
        }
        .with_thread_context(context(4, "/start"));
        assert_eq!(block_on(task), expect(5, "/updated"));
        assert_eq!(seen(), None);
    })
    .join()
    .unwrap();
}

#[test]
fn a_future_dropped_half_way_leaves_the_slot_as_it_was() {
    std_thread::spawn(|| {
        let _worker = context(1, "/worker").attach_scoped();
        let mut task = steps(5).with_thread_context(context(3, "/dropped"));
        assert!(poll_once(&mut task).is_pending());
        assert!(poll_once(&mut task).is_pending());
        drop(task);
        assert_eq!(seen(), expect(1, "/worker"));

        // Dropped on another thread than the one that polled it: nothing to undo there.
        let mut task = steps(5).with_thread_context(context(3, "/dropped"));
        assert!(poll_once(&mut task).is_pending());
        std_thread::spawn(move || {
            drop(task);
            assert_eq!(seen(), None);
        })
        .join()
        .unwrap();
        assert_eq!(seen(), expect(1, "/worker"));
    })
    .join()
    .unwrap();
}

#[test]
fn a_panicking_poll_puts_the_previous_record_back() {
    std_thread::spawn(|| {
        let _worker = context(1, "/worker").attach_scoped();
        let mut task = std::future::poll_fn(|_| -> Poll<()> { panic!("in the poll") })
            .with_thread_context(context(3, "/panics"));
        let unwound =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(&mut task)));
        assert!(unwound.is_err());
        assert_eq!(seen(), expect(1, "/worker"));
        assert!(task.context().is_some(), "the task's context is not lost");
    })
    .join()
    .unwrap();
}

#[test]
fn in_current_thread_context_copies_the_context_attached_at_creation() {
    std_thread::spawn(|| {
        let request = context(6, "/request").attach_scoped();
        let address = attached_record_address();
        let task = steps(2).in_current_thread_context();
        assert_eq!(seen(), expect(6, "/request"), "the original stays attached");
        assert_eq!(attached_record_address(), address);
        drop(request);
        assert_eq!(seen(), None);

        let copy = task.context().expect("a copy was taken");
        assert_ne!(copy.as_ptr(), address, "a copy, not the attached record");
        assert_eq!(copy.capacity(), ThreadContext::CAPACITY);

        // The copy follows the task to another worker, whose own context is set aside.
        let log = std_thread::spawn(move || {
            let _own = context(2, "/own").attach_scoped();
            let log = block_on(task);
            assert_eq!(seen(), expect(2, "/own"));
            log
        })
        .join()
        .unwrap();
        assert_eq!(log, vec![expect(6, "/request"); 2]);
    })
    .join()
    .unwrap();
}

#[test]
fn in_current_thread_context_with_none_attached_runs_with_none() {
    std_thread::spawn(|| {
        let task = steps(1).in_current_thread_context();
        assert!(task.context().is_none());
        let _own = context(2, "/own").attach_scoped();
        assert_eq!(
            block_on(task),
            vec![None],
            "not the polling thread's context"
        );
        assert_eq!(seen(), expect(2, "/own"));
    })
    .join()
    .unwrap();
}

#[test]
fn the_wrapper_can_be_spawned_on_other_threads() {
    fn assert_send<T: Send>(_: &T) {}
    let task = async {}.with_thread_context(context(1, "/send"));
    assert_send(&task);
}
