//! Waits on a test's child processes that end at a deadline, so that a child that hangs
//! fails its test instead of holding the run until the CI limit. Shared by the tests of
//! every package that starts children (`#[path]`); a child's ready lines are read on a
//! thread and received with a timeout, and a child's exit is polled until a deadline,
//! past which it is killed, reaped and the test panics saying what it waited for.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a child gets to print a ready line, or a run of the tool to end, unless its
/// test needs longer.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long a `Drop` waits for a child whose input it closed before killing it.
pub const GRACE: Duration = Duration::from_secs(5);

/// A child's output read line by line on a thread of its own, so that each awaited line
/// has a deadline. It keeps what it received, for the message of a deadline that passes
/// (a child's stderr is left to the test's own, where it shows).
pub struct Lines {
    label: String,
    receiver: Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    /// Reads `stdout` (a child's, named `label` in messages) on a new thread.
    pub fn new(label: impl Into<String>, stdout: impl Read + Send + 'static) -> Self {
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                let text = String::from_utf8_lossy(&line);
                let text = text.strip_suffix('\n').unwrap_or(&text);
                if sender.send(text.to_owned()).is_err() {
                    break;
                }
                line.clear();
            }
        });
        Self {
            label: label.into(),
            receiver,
            seen: Vec::new(),
        }
    }

    /// The next line, without its newline, waiting at most `within`; `None` when the
    /// child closed its output. Panics, naming `what` was awaited, when `within` passes.
    pub fn next_line(&mut self, what: &str, within: Duration) -> Option<String> {
        match self.receiver.recv_timeout(within) {
            Ok(line) => {
                self.seen.push(line.clone());
                Some(line)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => self.fail(what, within, "did not print"),
        }
    }

    /// The next line, waiting at most `within`; panics, naming `what` was awaited, when
    /// `within` passes or the child closes its output first.
    pub fn line(&mut self, what: &str, within: Duration) -> String {
        self.next_line(what, within)
            .unwrap_or_else(|| self.fail(what, within, "closed its output before"))
    }

    /// The lines up to and including the first that `ready` accepts, all within
    /// `within`; panics, naming `what` was awaited, when `within` passes or the output
    /// ends first.
    pub fn until(
        &mut self,
        what: &str,
        within: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.receiver.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(what, within, "closed its output before")
                }
                Err(RecvTimeoutError::Timeout) => self.fail(what, within, "did not print"),
            };
            self.seen.push(line.clone());
            let done = ready(&line);
            lines.push(line);
            if done {
                return lines;
            }
        }
    }

    fn fail(&self, what: &str, within: Duration, how: &str) -> ! {
        panic!(
            "{} {how} {what} within {} s; it printed {:?}",
            self.label,
            within.as_secs_f32(),
            self.seen
        )
    }
}

/// A stream read to its end on a thread of its own.
struct Captured {
    bytes: Arc<Mutex<Vec<u8>>>,
    done: Receiver<()>,
}

impl Captured {
    fn new(stream: Option<impl Read + Send + 'static>) -> Self {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let (sender, done) = mpsc::channel();
        let into = Arc::clone(&bytes);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            if let Some(mut stream) = stream {
                while let Ok(n @ 1..) = stream.read(&mut buffer) {
                    into.lock()
                        .expect("not poisoned")
                        .extend_from_slice(&buffer[..n]);
                }
            }
            let _ = sender.send(());
        });
        Self { bytes, done }
    }

    /// Whether the stream ended before `deadline`.
    fn ended_by(&self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        !matches!(self.done.recv_timeout(left), Err(RecvTimeoutError::Timeout))
    }

    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes.lock().expect("not poisoned"))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes.lock().expect("not poisoned")).into_owned()
    }
}

/// Polls `child` until it exits or `deadline` passes.
fn exited_by(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {}
            Ok(None) | Err(_) => return None,
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Waits at most `within` for `child` (named `what` in the message) to exit; past it,
/// kills and reaps the child and panics.
pub fn wait(child: &mut Child, what: &str, within: Duration) -> ExitStatus {
    exited_by(child, Instant::now() + within).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{what} did not exit within {} s; killed it",
            within.as_secs_f32()
        )
    })
}

/// `Child::wait_with_output` with a deadline: reads the child's piped stdout and stderr
/// on threads and waits at most `within` for it to exit and close them; past it, kills
/// and reaps the child and panics with what it printed so far.
pub fn wait_with_output(mut child: Child, what: &str, within: Duration) -> Output {
    let deadline = Instant::now() + within;
    let stdout = Captured::new(child.stdout.take());
    let stderr = Captured::new(child.stderr.take());
    let status = exited_by(&mut child, deadline);
    if let Some(status) = status {
        if stdout.ended_by(deadline) && stderr.ended_by(deadline) {
            return Output {
                status,
                stdout: stdout.take(),
                stderr: stderr.take(),
            };
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let secs = within.as_secs_f32();
    let how = if status.is_some() {
        format!(
            "exited, but its output was still open after {secs} s (held by a child of its own?)"
        )
    } else {
        format!("did not exit within {secs} s; killed it")
    };
    panic!(
        "{what} {how}; its stdout: {:?}; its stderr: {:?}",
        stdout.text(),
        stderr.text()
    )
}

/// `Command::output` with a deadline: runs `command` with no input and its output piped,
/// and returns its `Output` when it ends within `within`; past it, kills and reaps the
/// child and panics with the command and what it printed so far. Fails as `output` does
/// when the command cannot start.
pub fn output(command: &mut Command, within: Duration) -> std::io::Result<Output> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    Ok(wait_with_output(child, &format!("{command:?}"), within))
}

/// For a `Drop`: waits at most `within` for `child` to exit (its input closed, say), then
/// kills and reaps it. Never panics.
pub fn reap(child: &mut Child, within: Duration) {
    if exited_by(child, Instant::now() + within).is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
}
