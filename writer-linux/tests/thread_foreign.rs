//! Another library's record in the process-wide `otel_thread_ctx_v1` slot: builds the
//! `tests/fixtures/foreign` executable (which exports the slot, and whose `build.rs`
//! compiles the C writer `foreign.c` with the target's TLSDESC dialect) for the target this
//! test was built for, runs it, and checks that its own checks passed. The checks are in
//! the fixture's `src/main.rs`: while the slot points at the C library's guarded record,
//! every writer call leaves that record byte for byte intact, never reads before it, never
//! frees it, and puts it back in the slot whenever it took it out to attach a context of
//! its own.

#[path = "fixtures/build_fixture.rs"]
mod build_fixture;

use std::process::Command;

#[test]
fn a_foreign_record_in_the_slot_is_never_sized_written_or_freed() {
    let target = build_fixture::own_target();
    build_fixture::cargo("foreign", "build", target, &[]);
    let exe = build_fixture::artefact(target, "thread-foreign");
    let mut command = if cfg!(target_arch = "aarch64") {
        let mut c = Command::new("qemu-aarch64");
        c.args(["-L", "/usr/aarch64-linux-gnu"]).arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{} failed ({}; a SIGSEGV is an access to a guard page around the foreign record):\n\
         {stdout}{}",
        exe.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.ends_with("thread-foreign ok\n"), "{stdout}");
}
