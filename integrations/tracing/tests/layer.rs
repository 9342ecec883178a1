//! The layer, seen the way a reader sees a thread: the record `otel_thread_ctx_v1` points
//! at before, during and after spans; nested; entered on one thread and exited on
//! another; out of order; closed while entered elsewhere.

use std::sync::mpsc;
use std::thread as std_thread;

use otel_ctx_tracing::{span_ids, SpanIds, ThreadContextLayer};
use otel_ctx_writer::thread::{self, attached_record_address, Key, ThreadContext};
use tracing::{dispatcher, Dispatch};
use tracing_subscriber::prelude::*;

#[path = "../../../writer-linux/tests/thread_support/mod.rs"]
mod thread_support;
// What a reader would see on the calling thread now (`None`: the slot is NULL).
use thread_support::{own_record as seen, OwnRecord as Seen};

fn route_key() -> u8 {
    thread::register("http.route").unwrap().index()
}

fn dispatch() -> Dispatch {
    let layer = ThreadContextLayer::new()
        .with_attribute("http.route")
        .unwrap();
    Dispatch::new(tracing_subscriber::registry().with(layer))
}

fn expect(ids: SpanIds, route: Option<&str>) -> Option<Seen> {
    Some(Seen {
        trace_id: ids.trace_id,
        span_id: ids.span_id,
        trace_flags: ids.trace_flags,
        attrs: route
            .map(|r| vec![(route_key(), r.to_owned())])
            .unwrap_or_default(),
    })
}

/// Runs `f` on a fresh thread (a slot of its own) with `dispatch` as its subscriber.
fn on_thread<T: Send + 'static>(dispatch: &Dispatch, f: impl FnOnce() -> T + Send + 'static) -> T {
    let dispatch = dispatch.clone();
    std_thread::spawn(move || dispatcher::with_default(&dispatch, f))
        .join()
        .unwrap()
}

#[test]
fn the_slot_follows_a_span_before_during_and_after() {
    on_thread(&dispatch(), || {
        assert_eq!(seen(), None);
        let span = tracing::info_span!("request", http.route = "/cart");
        assert_eq!(seen(), None, "creating a span attaches nothing");
        let ids = span_ids(&span).expect("the layer keeps ids");
        assert_ne!(ids.trace_id, [0; 16]);
        assert_ne!(ids.span_id, [0; 8]);
        span.in_scope(|| assert_eq!(seen(), expect(ids, Some("/cart"))));
        assert_eq!(seen(), None);

        // A thread that had a record of its own gets it back.
        let own = ThreadContext::new([9; 16], [9; 8], 1, &[]).unwrap();
        let address = own.as_ptr();
        let _own = own.attach_scoped();
        span.in_scope(|| assert_eq!(seen(), expect(ids, Some("/cart"))));
        assert_eq!(attached_record_address(), address);
    });
}

#[test]
fn nested_spans_share_the_trace_and_restore_the_outer_record() {
    on_thread(&dispatch(), || {
        let outer = tracing::info_span!("outer", http.route = "/orders");
        let outer_ids = span_ids(&outer).unwrap();
        let _outer = outer.enter();
        let inner = tracing::info_span!("inner");
        let inner_ids = span_ids(&inner).unwrap();
        assert_eq!(inner_ids.trace_id, outer_ids.trace_id, "one trace");
        assert_ne!(inner_ids.span_id, outer_ids.span_id);
        inner.in_scope(|| assert_eq!(seen(), expect(inner_ids, None)));
        assert_eq!(seen(), expect(outer_ids, Some("/orders")));

        // A root span elsewhere starts another trace.
        let root = tracing::info_span!(parent: None, "root");
        assert_ne!(span_ids(&root).unwrap().trace_id, outer_ids.trace_id);
    });
}

#[test]
fn recorded_values_reach_the_attached_record_at_once() {
    on_thread(&dispatch(), || {
        let span = tracing::info_span!("request", http.route = tracing::field::Empty);
        let ids = span_ids(&span).unwrap();
        let _entered = span.enter();
        assert_eq!(seen(), expect(ids, None));
        span.record("http.route", "/users/:id");
        assert_eq!(seen(), expect(ids, Some("/users/:id")));
    });
}

#[test]
fn exits_out_of_order_keep_the_innermost_record_and_restore_the_first() {
    on_thread(&dispatch(), || {
        let a = tracing::info_span!("a", http.route = "/a");
        let b = tracing::info_span!(parent: None, "b", http.route = "/b");
        let (a_ids, b_ids) = (span_ids(&a).unwrap(), span_ids(&b).unwrap());
        let a_guard = a.enter();
        let b_guard = b.enter();
        assert_eq!(seen(), expect(b_ids, Some("/b")));
        drop(a_guard);
        assert_eq!(seen(), expect(b_ids, Some("/b")), "b is still entered");
        drop(b_guard);
        assert_eq!(seen(), None, "back to what was there before a");
        // Both records went back to their spans: entering again still works.
        a.in_scope(|| assert_eq!(seen(), expect(a_ids, Some("/a"))));
        b.in_scope(|| assert_eq!(seen(), expect(b_ids, Some("/b"))));
    });
}

#[test]
fn a_span_entered_on_one_thread_and_exited_on_another() {
    let dispatch = dispatch();
    // The same span, entered by hand on thread 1 and exited on thread 2: what a runtime
    // does when it moves an entered span's task (the layer sees enter and exit calls).
    let span = dispatcher::with_default(&dispatch, || {
        tracing::info_span!("moving", http.route = "/moving")
    });
    let ids = span_ids(&span).unwrap();
    let id = span.id().unwrap();
    let entered_id = id.clone();
    on_thread(&dispatch, move || {
        dispatcher::get_default(|d| d.enter(&entered_id));
        assert_eq!(seen(), expect(ids, Some("/moving")));
    });
    let exited_id = id.clone();
    on_thread(&dispatch, move || {
        let own = ThreadContext::new([7; 16], [7; 8], 1, &[]).unwrap();
        let _own = own.attach_scoped();
        let before = seen();
        dispatcher::get_default(|d| d.exit(&exited_id));
        assert_eq!(
            seen(),
            before,
            "an exit of a span never entered here changes nothing"
        );
    });
    // Entering again on a third thread builds a record for it.
    on_thread(&dispatch, move || {
        span.in_scope(|| assert_eq!(seen(), expect(ids, Some("/moving"))));
        assert_eq!(seen(), None);
    });
}

#[test]
fn a_span_entered_on_two_threads_at_once_has_a_record_on_each() {
    let dispatch = dispatch();
    let span = dispatcher::with_default(&dispatch, || {
        tracing::info_span!("shared", http.route = "/shared")
    });
    let ids = span_ids(&span).unwrap();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let first = {
        let (dispatch, span) = (dispatch.clone(), span.clone());
        std_thread::spawn(move || {
            dispatcher::with_default(&dispatch, || {
                let _entered = span.enter();
                let address = attached_record_address();
                entered_tx.send(address as usize).unwrap();
                go_rx.recv().unwrap();
                assert_eq!(seen(), expect(ids, Some("/shared")));
            });
            assert_eq!(seen(), None);
        })
    };
    let first_address = entered_rx.recv().unwrap();
    let span2 = span.clone();
    on_thread(&dispatch, move || {
        span2.in_scope(|| {
            assert_eq!(seen(), expect(ids, Some("/shared")));
            assert_ne!(attached_record_address() as usize, first_address);
        });
    });
    go_tx.send(()).unwrap();
    first.join().unwrap();
}

#[test]
fn a_span_closed_while_entered_elsewhere_stays_attached_there_until_exit() {
    let dispatch = dispatch();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let worker = {
        let dispatch = dispatch.clone();
        std_thread::spawn(move || {
            dispatcher::with_default(&dispatch, || {
                let span = tracing::info_span!("closing", http.route = "/closing");
                let ids = span_ids(&span).unwrap();
                let id = span.id().unwrap();
                // Enter through the subscriber, keeping the registry's own count of
                // handles to the span, then hand the last handle away to be closed.
                dispatcher::get_default(|d| d.enter(&id));
                entered_tx.send(span).unwrap();
                closed_rx.recv().unwrap();
                assert_eq!(seen(), expect(ids, Some("/closing")), "still attached here");
                dispatcher::get_default(|d| d.exit(&id));
                assert_eq!(seen(), None);
            });
        })
    };
    let span = entered_rx.recv().unwrap();
    let id = span.id().unwrap();
    dispatcher::with_default(&dispatch, || {
        drop(span);
        assert!(
            dispatcher::get_default(|d| d.current_span().id().cloned()) != Some(id),
            "nothing entered on this thread"
        );
    });
    closed_tx.send(()).unwrap();
    worker.join().unwrap();
}

#[test]
fn the_key_map_names_the_mapped_field() {
    let _layer = ThreadContextLayer::new()
        .with_attribute_as("route", "http.route")
        .unwrap();
    let keys = thread::registered_keys();
    assert_eq!(keys[usize::from(route_key())], "http.route");
    assert_eq!(Key::from_index(route_key()).index(), route_key());
}

#[test]
fn a_record_kept_on_a_thread_takes_values_recorded_on_another() {
    let dispatch = dispatch();
    let (span_tx, span_rx) = mpsc::channel();
    let (recorded_tx, recorded_rx) = mpsc::channel::<()>();
    let worker = {
        let dispatch = dispatch.clone();
        std_thread::spawn(move || {
            dispatcher::with_default(&dispatch, || {
                let span = tracing::info_span!("request", http.route = "/before");
                let ids = span_ids(&span).unwrap();
                // The exit keeps the record on this thread for the next enter.
                span.in_scope(|| assert_eq!(seen(), expect(ids, Some("/before"))));
                span_tx.send(span.clone()).unwrap();
                recorded_rx.recv().unwrap();
                span.in_scope(|| assert_eq!(seen(), expect(ids, Some("/after"))));
            });
        })
    };
    let span = span_rx.recv().unwrap();
    dispatcher::with_default(&dispatch, || {
        span.record("http.route", "/after");
    });
    recorded_tx.send(()).unwrap();
    worker.join().unwrap();
}

#[test]
fn a_record_kept_for_a_closed_span_is_never_attached_for_a_new_one() {
    on_thread(&dispatch(), || {
        let mut all = Vec::new();
        for n in 0..20 {
            let route = format!("/r{n}");
            let span = tracing::info_span!("request", http.route = %route);
            let ids = span_ids(&span).unwrap();
            span.in_scope(|| assert_eq!(seen(), expect(ids, Some(&route))));
            // Entered twice, so the second enter runs on what the first exit kept.
            span.in_scope(|| assert_eq!(seen(), expect(ids, Some(&route))));
            all.push(ids.span_id);
            // Dropped: closed, and its id free for the next span of the loop.
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 20, "every span had ids of its own");
    });
}
