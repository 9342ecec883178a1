//! Fork: a child never sees or touches its parent's context, and may publish its own.

mod process_support;

use otel_ctx_codec::proto::AnyValueView;
use otel_ctx_writer::process::{Attributes, Error, Publisher, Resource};
use process_support::*;

fn resource(name: &str) -> Resource {
    Resource::builder()
        .service_name(name)
        .build()
        .expect("build the resource")
}

/// In the child: publish a context of its own and read it back at its address.
fn child_publishes_its_own(dontfork: bool) -> Result<(), String> {
    let own = Publisher::publish(resource("child"), Attributes::new())
        .map_err(|e| format!("the child cannot publish: {e}"))?;
    let found = context_mappings();
    check(found.iter().any(|m| m.start == own.address()), || {
        format!("the child's context is not in its maps: {found:?}")
    })?;
    if dontfork {
        check(found.len() == 1, || {
            format!("the child should have one context: {found:?}")
        })?;
    }
    // SAFETY: `own` is alive and borrowed for the whole read.
    let back = unsafe { read_context(own.address()) }?;
    let name = back.view().resource_value("service.name");
    check(name == Some(AnyValueView::String("child")), || {
        format!("the child's context has service.name {name:?}")
    })?;
    own.unpublish()
        .map_err(|e| format!("the child cannot unpublish: {e}"))
}

#[test]
fn child_sees_no_context_mapping() {
    let _serial = lock();
    let publisher = Publisher::publish(resource("parent"), Attributes::new()).expect("publish");
    assert_eq!(context_mappings().len(), 1);
    if !dontfork_honoured() {
        report(
            "child_sees_no_context_mapping",
            ChildOutcome::Skipped(
                "MADV_DONTFORK is accepted but not honoured here (qemu-user ignores it), so \
                 children inherit every mapping"
                    .to_string(),
            ),
        );
        return;
    }
    let address = publisher.address();
    let outcome = in_child(|| {
        let found = context_mappings();
        check(found.is_empty(), || {
            format!("the child inherited a context mapping: {found:?}")
        })?;
        check(!mapping_covers(address), || {
            format!("the child has a mapping at the parent's context address {address:#x}")
        })?;
        Ok(ChildOutcome::Passed)
    });
    assert_eq!(outcome, Ok(ChildOutcome::Passed));
    drop(publisher);
}

#[test]
fn inherited_publisher_is_inert_and_the_child_publishes_its_own() {
    let _serial = lock();
    let dontfork = dontfork_honoured();
    let mut slot =
        Some(Publisher::publish(resource("parent"), Attributes::new()).expect("publish"));
    let parent_pid = slot.as_ref().unwrap().pid();
    let address = slot.as_ref().unwrap().address();
    // SAFETY: the publisher in `slot` is alive and unchanged during the read.
    let before = unsafe { read_back_published(address) }.expect("read back");

    let outcome = in_child(|| {
        // The child's copy of the handle; the parent's stays in its own `slot`.
        let mut inherited = slot.take().ok_or("no publisher")?;
        inert_in_child(&mut inherited, parent_pid)?;
        // Dropping the inherited handle must neither write to nor unmap the parent's
        // address: where the mapping was not inherited, a write would fault.
        drop(inherited);
        if !dontfork {
            // qemu-user: the child has a copy of the mapping; the drop left it untouched.
            // SAFETY: the inherited copy is still mapped (not unmapped by the drop).
            let copy = unsafe { read_context(address) }?;
            check(copy.header == before.header, || {
                "dropping the inherited handle changed the mapping".to_string()
            })?;
        }
        child_publishes_its_own(dontfork)?;
        if dontfork {
            Ok(ChildOutcome::Passed)
        } else {
            Ok(ChildOutcome::Skipped(
                "MADV_DONTFORK not honoured here (qemu-user ignores it): checked that the \
                 inherited copy was left untouched instead of checking it is absent"
                    .to_string(),
            ))
        }
    });
    match outcome {
        Ok(outcome) => report("inherited_publisher_is_inert", outcome),
        Err(e) => panic!("{e}"),
    }

    // The parent's context is intact, and still updatable.
    let mut publisher = slot.expect("the parent keeps its publisher");
    // SAFETY: `publisher` is alive and unchanged during the read.
    let after = unsafe { read_back_published(address) }.expect("read back");
    assert_eq!(after.header, before.header);
    assert_eq!(after.payload, before.payload);
    publisher
        .update_with(|r, _| {
            r.set("service.version", "after-fork");
        })
        .expect("the parent updates after the fork");
    // SAFETY: as above.
    let updated = unsafe { read_back_published(address) }.expect("read back");
    assert!(updated.header.monotonic_published_at_ns > before.header.monotonic_published_at_ns);
}

#[test]
fn unpublish_in_the_child_leaves_the_parent_intact() {
    let _serial = lock();
    let mut slot =
        Some(Publisher::publish(resource("parent"), Attributes::new()).expect("publish"));
    let address = slot.as_ref().unwrap().address();
    // SAFETY: the publisher in `slot` is alive and unchanged during the read.
    let before = unsafe { read_back_published(address) }.expect("read back");
    let outcome = in_child(|| {
        let inherited = slot.take().ok_or("no publisher")?;
        inherited
            .unpublish()
            .map_err(|e| format!("unpublish in the child: {e}"))?;
        Ok(ChildOutcome::Passed)
    });
    assert_eq!(outcome, Ok(ChildOutcome::Passed));
    // SAFETY: as above.
    let after = unsafe { read_back_published(address) }.expect("read back");
    assert_eq!(after.header, before.header);
    assert_eq!(after.payload, before.payload);
    slot.unwrap().unpublish().expect("unpublish in the parent");
    assert_eq!(context_mappings(), []);
}

/// Runs `f` in a forked child that is pid 1 of a new PID namespace. Skipped where this
/// process may not create one (`unshare(CLONE_NEWPID)` needs `CAP_SYS_ADMIN`).
fn in_new_pid_namespace(f: impl FnOnce() -> ChildResult) -> ChildResult {
    in_child(|| {
        // SAFETY: a plain syscall; it changes only the namespace of this (forked,
        // single-threaded) process's future children.
        if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
            let error = std::io::Error::last_os_error();
            return Ok(ChildOutcome::Skipped(format!(
                "unshare(CLONE_NEWPID) failed ({error}); run the tests as root to create PID \
                 namespaces"
            )));
        }
        // The first child forked after `unshare` is pid 1 of the new namespace.
        in_child(f)
    })
}

fn current_pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// In a forked child: `inherited`, published by `publisher_pid`, knows it is inherited,
/// reads no header and refuses an update with `InheritedAcrossFork`.
fn inert_in_child(inherited: &mut Publisher, publisher_pid: i32) -> Result<(), String> {
    check(inherited.is_inherited(), || {
        "is_inherited() is false in the child".to_string()
    })?;
    check(inherited.header().is_none(), || {
        "the child read a header it does not have".to_string()
    })?;
    let err = inherited
        .update_with(|r, _| {
            r.set("service.name", "overwritten");
        })
        .unwrap_err();
    check(
        err == Error::InheritedAcrossFork {
            publisher_pid,
            current_pid: current_pid(),
        },
        || format!("update in the child: {err:?}"),
    )
}

/// In a child with the publisher's pid: `inherited` must act as inherited. Stops at the
/// first check that fails, as every later one would touch the parent's (absent) mapping
/// if the child took the publisher for its own.
fn inherited_checks(inherited: &mut Publisher, address: usize) -> Result<(), String> {
    check(current_pid() == 1 && inherited.pid() == 1, || {
        format!(
            "the child is pid {} and the publisher pid {}, both should be 1",
            current_pid(),
            inherited.pid()
        )
    })?;
    check(!mapping_covers(address), || {
        format!("the child has a mapping at the parent's context address {address:#x}")
    })?;
    inert_in_child(inherited, 1)
}

#[test]
fn a_child_with_the_publishers_pid_is_still_a_forked_child() {
    let _serial = lock();
    if !dontfork_honoured() {
        report(
            "a_child_with_the_publishers_pid_is_still_a_forked_child",
            ChildOutcome::Skipped(
                "MADV_DONTFORK is accepted but not honoured here (qemu-user ignores it), so \
                 a child has its parent's mapping and nothing can go wrong"
                    .to_string(),
            ),
        );
        return;
    }
    // The publisher is pid 1 of one PID namespace, and its forked child pid 1 of another:
    // the pids are equal, yet the child has no context mapping (`MADV_DONTFORK`).
    let outcome = in_new_pid_namespace(|| {
        check(current_pid() == 1, || {
            format!("the publisher is pid {}, not 1", current_pid())
        })?;
        let publisher = Publisher::publish(resource("pid-1-parent"), Attributes::new())
            .map_err(|e| format!("publish as pid 1: {e}"))?;
        let address = publisher.address();
        let mut slot = Some(publisher);
        let child = in_new_pid_namespace(|| {
            let mut inherited = slot.take().ok_or("no publisher")?;
            let checked = inherited_checks(&mut inherited, address);
            if checked.is_err() {
                // A publisher the child took for its own would write to the absent mapping
                // when dropped: keep the report instead of a crash.
                std::mem::forget(inherited);
                return checked.map(|()| ChildOutcome::Passed);
            }
            // Neither writes to nor unmaps the parent's address.
            drop(inherited);
            child_publishes_its_own(true)?;
            Ok(ChildOutcome::Passed)
        })?;
        if let ChildOutcome::Skipped(reason) = child {
            return Ok(ChildOutcome::Skipped(reason));
        }
        // The publisher's context is intact, and still its own.
        let mut publisher = slot.ok_or("the parent lost its publisher")?;
        check(!publisher.is_inherited(), || {
            "the publisher counts as inherited in its own process".to_string()
        })?;
        // SAFETY: `publisher` is alive and unchanged during the read.
        let back = unsafe { read_back_published(address) }?;
        let name = back.view().resource_value("service.name");
        check(name == Some(AnyValueView::String("pid-1-parent")), || {
            format!("the parent's context has service.name {name:?}")
        })?;
        publisher
            .update_with(|r, _| {
                r.set("service.version", "after-fork");
            })
            .map_err(|e| format!("the parent cannot update after the fork: {e}"))?;
        publisher
            .unpublish()
            .map_err(|e| format!("the parent cannot unpublish: {e}"))?;
        Ok(ChildOutcome::Passed)
    });
    match outcome {
        Ok(outcome) => report(
            "a_child_with_the_publishers_pid_is_still_a_forked_child",
            outcome,
        ),
        Err(e) => panic!("{e}"),
    }
}
