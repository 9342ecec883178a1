//! Why the kernel refused to let this reader look at a process: worked out after the
//! refusal from what `/proc` shows ([`diagnose`](crate::procfs::diagnose)), so that an
//! error can name what refuses instead of guessing ("run as root" to a reader that is
//! root).
//!
//! The kernel's ptrace access check (`__ptrace_may_access`, then the capability and
//! Yama checks, then any other security module) refuses a reader that:
//! - has another uid than the process, without `CAP_SYS_PTRACE`;
//! - has its uid, but the process is not dumpable (setuid, `prctl(PR_SET_DUMPABLE, 0)`)
//!   or holds capabilities the reader lacks, without `CAP_SYS_PTRACE`;
//! - is not privileged in the process's user namespace (a container's);
//! - is barred by Yama's `kernel.yama.ptrace_scope` (1: only ancestors; 2: only
//!   `CAP_SYS_PTRACE`; 3: nobody);
//! - is barred by a security module (Landlock, AppArmor, SELinux, a BPF LSM).

use std::fmt;

/// What refused access to a process, as far as `/proc` tells.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refuser {
    /// The process belongs to another user, and this reader lacks `CAP_SYS_PTRACE`.
    OtherUser,
    /// The process is not dumpable (setuid, or `PR_SET_DUMPABLE` 0), and this reader
    /// lacks `CAP_SYS_PTRACE`.
    NotDumpable,
    /// The process holds capabilities this reader lacks (named), and this reader lacks
    /// `CAP_SYS_PTRACE`.
    MoreCapabilities(Vec<String>),
    /// Yama's `kernel.yama.ptrace_scope`, at this value.
    Yama(u8),
    /// The process is in another user namespace, where this reader has no
    /// `CAP_SYS_PTRACE`.
    OtherUserNamespace,
    /// None of the above: this reader has `CAP_SYS_PTRACE` in the process's user
    /// namespace, and Yama does not bar it, so a security module refuses (the active
    /// ones listed, when the kernel says).
    SecurityModule(Option<String>),
}

impl fmt::Display for Refuser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OtherUser => f.write_str(
                "the process belongs to another user: run as root, or with CAP_SYS_PTRACE",
            ),
            Self::NotDumpable => f.write_str(
                "the process is not dumpable (setuid, or prctl(PR_SET_DUMPABLE, 0)): run as \
                 root, or with CAP_SYS_PTRACE",
            ),
            Self::MoreCapabilities(caps) => write!(
                f,
                "the process holds capabilities this reader lacks ({}): run with those, or \
                 with CAP_SYS_PTRACE",
                caps.join(", ")
            ),
            Self::Yama(3) => f.write_str(
                "Yama's kernel.yama.ptrace_scope is 3, which forbids ptrace to everyone until \
                 the next boot",
            ),
            Self::Yama(2) => f.write_str(
                "Yama's kernel.yama.ptrace_scope is 2: only a reader with CAP_SYS_PTRACE may \
                 look (run as root)",
            ),
            Self::Yama(scope) => write!(
                f,
                "Yama's kernel.yama.ptrace_scope is {scope}: only the process's ancestors may \
                 look without CAP_SYS_PTRACE (run as root, or set it to 0)"
            ),
            Self::OtherUserNamespace => f.write_str(
                "the process is in another user namespace (a container's), where this reader \
                 has no CAP_SYS_PTRACE: run the reader as root of the host (or of that \
                 namespace)",
            ),
            Self::SecurityModule(None) => f.write_str(
                "this reader has CAP_SYS_PTRACE and Yama does not bar it, so a security \
                 module (Landlock, AppArmor, SELinux or a BPF LSM) refuses",
            ),
            Self::SecurityModule(Some(modules)) => write!(
                f,
                "this reader has CAP_SYS_PTRACE and Yama does not bar it, so a security \
                 module refuses (active: {modules})"
            ),
        }
    }
}

/// The names of the capabilities whose bits are in `mask`.
pub(crate) fn cap_names(mask: u64) -> Vec<String> {
    const NAMES: [&str; 41] = [
        "chown",
        "dac_override",
        "dac_read_search",
        "fowner",
        "fsetid",
        "kill",
        "setgid",
        "setuid",
        "setpcap",
        "linux_immutable",
        "net_bind_service",
        "net_broadcast",
        "net_admin",
        "net_raw",
        "ipc_lock",
        "ipc_owner",
        "sys_module",
        "sys_rawio",
        "sys_chroot",
        "sys_ptrace",
        "sys_pacct",
        "sys_admin",
        "sys_boot",
        "sys_nice",
        "sys_resource",
        "sys_time",
        "sys_tty_config",
        "mknod",
        "lease",
        "audit_write",
        "audit_control",
        "setfcap",
        "mac_override",
        "mac_admin",
        "syslog",
        "wake_alarm",
        "block_suspend",
        "audit_read",
        "perfmon",
        "bpf",
        "checkpoint_restore",
    ];
    (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| match NAMES.get(bit) {
            Some(name) => format!("cap_{name}"),
            None => format!("capability {bit}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_names() {
        assert_eq!(
            cap_names(1 << 24 | 1 << 19),
            ["cap_sys_ptrace", "cap_sys_resource"]
        );
        assert_eq!(cap_names(1 << 50), ["capability 50"]);
    }

    #[test]
    fn messages_name_the_refuser() {
        assert!(Refuser::Yama(3).to_string().contains("ptrace_scope is 3"));
        assert!(Refuser::OtherUser.to_string().contains("another user"));
        assert!(Refuser::SecurityModule(Some("landlock, yama".into()))
            .to_string()
            .contains("active: landlock, yama"));
    }
}
