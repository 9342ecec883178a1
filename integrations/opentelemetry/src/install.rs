//! The error of `ThreadContextObserver::install`, one definition for the observer on Linux
//! and its twin elsewhere.

use std::fmt;

/// Why [`ThreadContextObserver::install`](crate::ThreadContextObserver::install) did not install the observer (outside Linux it
/// never fails: there is nothing to install).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallError {
    /// A [`ThreadContextObserver`](crate::ThreadContextObserver) was installed before: that one stays.
    AlreadyInstalled,
    /// Another context observer is installed in this process, and the API keeps one.
    OtherObserver,
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AlreadyInstalled => {
                "a thread-context observer is already installed in this process; the first \
                 one stays"
            }
            Self::OtherObserver => {
                "another OpenTelemetry context observer is installed in this process, and \
                 there can be only one"
            }
        })
    }
}

impl std::error::Error for InstallError {}
