//! A process that spins and publishes nothing: a shell in a busy loop, killed and reaped
//! when the test lets go of it, whether the test passed or panicked (a spinner left
//! behind would take a core from every later test and hold the test run's output open).

use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Stdio};

/// The spinning shell; derefs to its [`Child`].
pub struct Spinner(Child);

impl Spinner {
    /// Starts `sh -c 'while :; do :; done'` with no input and no output.
    pub fn start() -> Self {
        Self::script("while :; do :; done")
    }

    /// Starts `sh -c <script>` with no input and no output.
    pub fn script(script: &str) -> Self {
        let child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sh");
        Self(child)
    }
}

impl Deref for Spinner {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Spinner {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        // Either may fail when the test has already killed and reaped it.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
