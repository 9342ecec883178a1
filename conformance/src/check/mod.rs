//! The checker: runs every rule of [`RuleId`] against a live process and says, rule by
//! rule, what it saw.
//!
//! The check reads the process as any reader would (maps, `process_vm_readv`, ptrace
//! stops), but looks further than a reader: it also finds mappings readers would miss
//! (a name that is almost right, an unnamed mapping that starts with `OTEL_CTX`, an
//! executable one), judges headers and payloads that readers would refuse, and watches
//! the process for [`CheckOptions::observe`] to see updates and to sample every thread a
//! few times. The process is never written to; each thread is stopped only for the few
//! copies of one sample.

mod process;
mod program;
mod report;
mod rules;
mod run;
mod smaps;
mod thread;
mod verdict;

pub use program::{
    check_command, ProgramError, Stage, StopReason, Stopped, STDIN_GRACE, TERM_GRACE,
};
pub use report::Document;
pub use rules::{Level, RuleId};
pub use run::{check, wait_for_context, CheckOptions, DEFAULT_THREAD_ROUNDS, MAX_WINDOW};
pub use verdict::{Report, RuleResult, Status};
