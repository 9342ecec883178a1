//! A sandbox that denies `memfd_create`: publish falls back to an anonymous mapping, which
//! is only discoverable where the kernel can name it.

mod process_support;

use std::collections::BTreeMap;
use std::ffi::CStr;

use otel_ctx_codec::proto::AnyValueView;
use otel_ctx_writer::process::{Attributes, Backing, Error, Publisher, Resource, Syscalls};
use process_support::*;
use rustix::io::Errno;
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};

fn resource() -> Resource {
    Resource::builder()
        .service_name("sandboxed")
        .build()
        .expect("build the resource")
}

/// Installs a seccomp filter on this (child) process that makes `memfd_create` fail with
/// `EPERM`. `Ok(Some(reason))` when this platform cannot install filters.
fn deny_memfd_create() -> Result<Option<String>, String> {
    let rules = BTreeMap::from([(libc::SYS_memfd_create, vec![])]);
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("{e:?}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| format!("seccomp program: {e:?}"))?;
    if let Err(e) = seccompiler::apply_filter(&program) {
        return Ok(Some(format!(
            "this platform refuses seccomp filters ({e}); qemu-user does"
        )));
    }
    match rustix::fs::memfd_create(c"probe", rustix::fs::MemfdFlags::CLOEXEC) {
        Err(Errno::PERM) => Ok(None),
        other => Err(format!("the filter did not deny memfd_create: {other:?}")),
    }
}

/// Whether `publisher` fell back to an anonymous mapping because `memfd_create` was
/// denied (`EPERM`, from the filter).
fn backed_anonymously(publisher: &Publisher) -> Result<(), String> {
    let backing = publisher.backing();
    check(
        backing
            == Backing::Anonymous {
                memfd_error: Errno::PERM,
            },
        || format!("backing {backing:?}"),
    )
}

/// Reads a context published into a named anonymous mapping back by its name.
fn check_named_anonymous(publisher: &Publisher) -> Result<(), String> {
    // SAFETY: `publisher` is alive and borrowed for the whole read.
    let back = unsafe { read_back_published(publisher.address()) }?;
    let found = context_mappings();
    check(found[0].name == "[anon:OTEL_CTX]", || {
        format!("named anonymous mapping shows as {found:?}")
    })?;
    let name = back.view().resource_value("service.name");
    check(name == Some(AnyValueView::String("sandboxed")), || {
        format!("service.name read back as {name:?}")
    })
}

#[test]
fn memfd_denied_by_seccomp() {
    let _serial = lock();
    let outcome = in_child(|| {
        if let Some(reason) = deny_memfd_create()? {
            return Ok(ChildOutcome::Skipped(reason));
        }
        let naming = naming_supported();
        match Publisher::publish(resource(), Attributes::new()) {
            Ok(publisher) => {
                check(naming, || {
                    "published although neither memfd nor naming works here".to_string()
                })?;
                backed_anonymously(&publisher)?;
                check(publisher.is_named(), || "not named".to_string())?;
                check_named_anonymous(&publisher)?;
            }
            Err(err) => {
                check(!naming, || {
                    format!("naming works here, yet publish failed: {err}")
                })?;
                check(
                    matches!(
                        err,
                        Error::Undiscoverable {
                            memfd: Errno::PERM,
                            ..
                        }
                    ),
                    || format!("expected Undiscoverable with EPERM, got {err:?}"),
                )?;
                let message = err.to_string();
                check(
                    message.contains("memfd_create denied (EPERM)")
                        && message.contains("no reader can find it"),
                    || format!("message: {message}"),
                )?;
                check(context_mappings().is_empty(), || {
                    "a context mapping was left behind".to_string()
                })?;
            }
        }
        Ok(ChildOutcome::Passed)
    });
    match outcome {
        Ok(outcome) => report("memfd_denied_by_seccomp", outcome),
        Err(e) => panic!("{e}"),
    }
}

fn naming_simulated(_: &[u8], _: &CStr) -> Result<(), Errno> {
    Ok(())
}

#[test]
fn memfd_denied_by_seccomp_with_naming_simulated() {
    let _serial = lock();
    let outcome = in_child(|| {
        if let Some(reason) = deny_memfd_create()? {
            return Ok(ChildOutcome::Skipped(reason));
        }
        let syscalls = Syscalls {
            name_region: naming_simulated,
            ..Syscalls::default()
        };
        let mut publisher =
            Publisher::publish_with_syscalls(resource(), Attributes::new(), syscalls)
                .map_err(|e| format!("publish with naming simulated: {e}"))?;
        backed_anonymously(&publisher)?;
        // SAFETY: `publisher` is alive and borrowed for the whole read.
        let first = unsafe { read_context(publisher.address()) }?;
        publisher
            .update_with(|r, _| {
                r.set("service.version", "2");
            })
            .map_err(|e| format!("update: {e}"))?;
        // SAFETY: as above.
        let second = unsafe { read_context(publisher.address()) }?;
        check(
            second.header.monotonic_published_at_ns > first.header.monotonic_published_at_ns,
            || "timestamp did not increase".to_string(),
        )?;
        let address = publisher.address();
        publisher
            .unpublish()
            .map_err(|e| format!("unpublish: {e}"))?;
        check(!mapped_at(address), || "still mapped".to_string())?;
        Ok(ChildOutcome::Passed)
    });
    match outcome {
        Ok(outcome) => report("memfd_denied_by_seccomp_with_naming_simulated", outcome),
        Err(e) => panic!("{e}"),
    }
}
