//! The context observer seen through the thread's `otel_thread_ctx_v1` slot: the record
//! before, during and after `Context::attach`, nested and out-of-order guards, contexts
//! without a valid span, futures wrapped with `FutureExt::with_context` on a multi-thread
//! tokio runtime, and tasks dropped between polls.
//!
//! The observer is process-wide: every test installs the same one (`observer()`).

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context as TaskContext, Poll, Waker};
use std::thread as std_thread;

use opentelemetry::baggage::BaggageExt;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use otel_ctx_opentelemetry::observer::{InstallError, ThreadContextObserver};
use otel_ctx_opentelemetry::ThreadAttributesExt;
use otel_ctx_writer::thread::{self, attached_record_address, Key, ThreadContext};

mod support;

use support::{remote, seen, Seen};

fn ids(trace: u8, span: u8, flags: u8) -> Option<Seen> {
    Some(([trace; 16], [span; 8], flags, vec![]))
}

/// The key taken from the baggage entry `tenant.id`.
fn tenant_key() -> Key {
    observer();
    thread::register("tenant.id").unwrap()
}

/// Installs the observer once for this test process.
fn observer() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        ThreadContextObserver::builder()
            .baggage_attribute("tenant.id")
            .unwrap()
            .build()
            .install()
            .expect("the first observer of the process");
    });
}

/// A context with a remote span context, made after the observer is installed.
fn span_cx(trace: u8, span: u8, flags: u8) -> Context {
    observer();
    remote(trace, span, flags)
}

/// Runs `f` on a new thread, whose slot starts empty.
fn on_new_thread(f: impl FnOnce() + Send + 'static) {
    std_thread::spawn(f).join().unwrap();
}

#[test]
fn a_second_install_is_refused() {
    observer();
    assert!(ThreadContextObserver::is_installed());
    assert_eq!(
        ThreadContextObserver::new().install(),
        Err(InstallError::AlreadyInstalled)
    );
}

#[test]
fn attach_puts_the_record_in_the_slot_until_the_guard_drops() {
    let cx = span_cx(0x11, 0x22, 0x01);
    on_new_thread(move || {
        assert_eq!(seen(), None);
        {
            let _guard = cx.clone().attach();
            assert_eq!(seen(), ids(0x11, 0x22, 0x01));
        }
        assert_eq!(seen(), None);
    });
}

#[test]
fn the_record_is_built_once_per_context_and_shared_by_its_clones() {
    let cx = span_cx(0x12, 0x34, 0x01);
    on_new_thread(move || {
        let first = {
            let _guard = cx.clone().attach();
            attached_record_address()
        };
        let second = {
            let _guard = cx.clone().attach();
            attached_record_address()
        };
        assert!(!first.is_null());
        assert_eq!(first, second, "the same record, not a new one");
    });
}

#[test]
fn nested_contexts_restore_the_outer_record() {
    let outer = span_cx(0x01, 0x02, 0x01);
    let route = thread::register("http.route").unwrap();
    on_new_thread(move || {
        let _outer = outer.clone().attach();
        assert_eq!(seen(), ids(0x01, 0x02, 0x01));
        {
            // A child of the outer context, with an attribute value it carries.
            let inner = outer
                .with_remote_span_context(SpanContext::new(
                    TraceId::from_bytes([0x01; 16]),
                    SpanId::from_bytes([0x03; 8]),
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ))
                .with_thread_attribute(route, "/cart");
            let _inner = inner.clone().attach();
            assert_eq!(
                seen(),
                Some((
                    [0x01; 16],
                    [0x03; 8],
                    0x01,
                    vec![(route.index(), "/cart".into())]
                ))
            );
            {
                // The same context again, inside itself: its record is in the slot's
                // saved values, so this enter gets a copy.
                let inside = attached_record_address();
                let _again = inner.attach();
                assert_ne!(attached_record_address(), inside);
                assert_eq!(seen().unwrap().1, [0x03; 8]);
            }
            assert_eq!(seen().unwrap().1, [0x03; 8]);
        }
        assert_eq!(seen(), ids(0x01, 0x02, 0x01));
    });
}

#[test]
fn baggage_entries_chosen_become_attributes() {
    let tenant = tenant_key();
    let cx = span_cx(0x05, 0x06, 0x01).with_baggage([
        KeyValue::new("tenant.id", "acme"),
        KeyValue::new("other", "x"),
    ]);
    on_new_thread(move || {
        let _guard = cx.attach();
        assert_eq!(
            seen(),
            Some((
                [0x05; 16],
                [0x06; 8],
                0x01,
                vec![(tenant.index(), "acme".into())]
            ))
        );
    });
}

#[test]
fn an_invalid_span_context_detaches_until_exit() {
    observer();
    on_new_thread(|| {
        let own = ThreadContext::new([9; 16], [9; 8], 1, &[]).unwrap();
        let address = own.as_ptr();
        let _own = own.attach_scoped();
        {
            struct Value;
            let _guard = Context::new().with_value(Value).attach();
            assert_eq!(seen(), None, "no span: no context, not the previous one");
        }
        assert_eq!(attached_record_address(), address);
        {
            let cx = Context::new().with_remote_span_context(SpanContext::empty_context());
            let _guard = cx.attach();
            assert_eq!(seen(), None);
            {
                // A valid span inside the invalid one, and back to none.
                let _inner = span_cx(0x07, 0x08, 0x00).attach();
                assert_eq!(seen(), ids(0x07, 0x08, 0x00));
            }
            assert_eq!(seen(), None);
        }
        assert_eq!(attached_record_address(), address);
    });
}

#[test]
fn guards_dropped_out_of_order_restore_what_was_there_before() {
    let (a, b, c) = (
        span_cx(0x0a, 0x0a, 0x01),
        span_cx(0x0b, 0x0b, 0x01),
        span_cx(0x0c, 0x0c, 0x01),
    );
    on_new_thread(move || {
        let own = ThreadContext::new([9; 16], [9; 8], 1, &[]).unwrap();
        let address = own.as_ptr();
        let _own = own.attach_scoped();
        let guard_a = a.clone().attach();
        let guard_b = b.clone().attach();
        let guard_c = c.clone().attach();
        // Dropping a guard that is not the innermost one changes nothing current.
        drop(guard_b);
        assert_eq!(seen(), ids(0x0c, 0x0c, 0x01));
        // The innermost one: the current context is `a` again, and so is the record.
        drop(guard_c);
        assert_eq!(seen(), ids(0x0a, 0x0a, 0x01));
        drop(guard_a);
        assert_eq!(attached_record_address(), address);

        // The records went back to their contexts: entering them again reuses them,
        // and `b`'s, skipped, was freed and is made anew.
        let _b = b.attach();
        assert_eq!(seen(), ids(0x0b, 0x0b, 0x01));
    });
}

#[test]
fn the_same_context_on_two_threads_at_once_gets_a_record_on_each() {
    let cx = span_cx(0x21, 0x22, 0x01);
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let addresses = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (cx, barrier, addresses) = (cx.clone(), barrier.clone(), addresses.clone());
            std_thread::spawn(move || {
                let _guard = cx.attach();
                assert_eq!(seen(), ids(0x21, 0x22, 0x01));
                addresses
                    .lock()
                    .unwrap()
                    .push(attached_record_address() as usize);
                // Both are attached at this point.
                barrier.wait();
                assert_eq!(seen(), ids(0x21, 0x22, 0x01));
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let addresses = addresses.lock().unwrap();
    assert_ne!(addresses[0], addresses[1]);
}

/// Polls `future` once with a waker that does nothing.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut TaskContext::from_waker(Waker::noop()))
}

/// A future that is pending `n` times (waking itself), then ready.
struct YieldTimes(u32);

impl Future for YieldTimes {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn a_future_polled_on_two_threads_has_its_context_on_each_and_nowhere_else() {
    let cx = span_cx(0x31, 0x32, 0x01);
    let task = Box::pin(
        async {
            assert_eq!(seen(), ids(0x31, 0x32, 0x01));
            YieldTimes(1).await;
            assert_eq!(seen(), ids(0x31, 0x32, 0x01));
        }
        .with_context(cx),
    );
    let task = Mutex::new(task);
    std_thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut task = task.lock().unwrap();
                assert!(poll_once(task.as_mut()).is_pending());
                assert_eq!(seen(), None);
            })
            .join()
            .unwrap();
        scope
            .spawn(|| {
                let mut task = task.lock().unwrap();
                assert!(poll_once(task.as_mut()).is_ready());
                assert_eq!(seen(), None);
            })
            .join()
            .unwrap();
    });
}

#[test]
fn a_task_dropped_mid_span_leaves_the_previous_record_in_place() {
    let cx = span_cx(0x41, 0x42, 0x01);
    on_new_thread(move || {
        let own = ThreadContext::new([9; 16], [9; 8], 1, &[]).unwrap();
        let address = own.as_ptr();
        let _own = own.attach_scoped();
        {
            let mut task = pin!(async {
                assert_eq!(seen(), ids(0x41, 0x42, 0x01));
                std::future::pending::<()>().await;
            }
            .with_context(cx.clone()));
            assert!(poll_once(task.as_mut()).is_pending());
            assert_eq!(attached_record_address(), address);
            // Dropped here, in the middle of its span.
        }
        assert_eq!(attached_record_address(), address);
        // The context's record is still there for the next task in the same span.
        let mut task = pin!(async { seen() }.with_context(cx));
        assert_eq!(poll_once(task.as_mut()), Poll::Ready(ids(0x41, 0x42, 0x01)));
        assert_eq!(attached_record_address(), address);
    });
}

#[test]
fn tasks_hopping_workers_keep_their_context_on_a_multi_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let hops = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..64u8 {
            let (trace, span) = (n + 1, n + 100);
            let cx = span_cx(trace, span, 0x01);
            tasks.spawn(
                async move {
                    let mut threads = HashSet::new();
                    for _ in 0..50 {
                        assert_eq!(seen(), ids(trace, span, 0x01));
                        threads.insert(std_thread::current().id());
                        tokio::task::yield_now().await;
                    }
                    // A task spawned from inside the span, without the context, has none.
                    let plain = tokio::spawn(async { seen() }).await.unwrap();
                    assert_eq!(plain, None);
                    threads.len() - 1
                }
                .with_context(cx),
            );
        }
        let mut hops = 0;
        while let Some(moved) = tasks.join_next().await {
            hops += moved.unwrap();
        }
        hops
    });
    // 64 tasks yielding 50 times each on 4 workers: some of them moved.
    assert!(hops > 0, "no task changed worker: the test showed nothing");
    // Between polls, the workers hold no context.
    let idle = runtime.block_on(async {
        let mut seen_idle = Vec::new();
        for _ in 0..8 {
            seen_idle.push(tokio::spawn(async { seen() }).await.unwrap());
        }
        seen_idle
    });
    assert!(idle.iter().all(Option::is_none));
}
