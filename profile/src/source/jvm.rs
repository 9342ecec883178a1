//! A HotSpot JVM asked to write its perf map (`--java-perf-map`): what `jcmd <pid>
//! Compiler.perfmap` does, through the JVM's attach mechanism, so that its JIT-compiled
//! Java methods are named ([`perf_map`](super::perf_map) reads the map). Opt-in: a JVM is
//! touched only when asked, and a process that is not a HotSpot JVM never is.
//!
//! The attach protocol, as HotSpot on Linux has it: the JVM listens on the UNIX socket
//! `/tmp/.java_pid<pid>` (its pid and `/tmp` as its own namespaces see them) once its
//! attach listener runs; to start it, a file `.attach_pid<pid>` is made in its working
//! directory (or its `/tmp`) and the JVM is sent `SIGQUIT`. A request is the protocol
//! version `1`, the command and three arguments, each ended by a NUL; the answer is a
//! status line (`0`: done) and the command's output. The paths are taken through
//! `/proc/<pid>/root` and `/proc/<pid>/cwd`, so they are the target's, in its own mount
//! namespace; the attach file is given to the JVM's user and group, whom HotSpot expects.
//!
//! What makes a process a JVM that may be signalled: `libjvm.so` is mapped, and the
//! process catches `SIGQUIT` (`SigCgt`; a JVM run with `-Xrs` does not, and `SIGQUIT`
//! would end it). Anything else is left alone.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use otel_ctx_reader::procfs;

/// How long the JVM may take to start its attach listener after `SIGQUIT`.
const LISTENER_WAIT: Duration = Duration::from_secs(3);
/// How long one request may take, the map written.
const REQUEST_TIME: Duration = Duration::from_secs(10);
/// The most of an answer read (the command prints nothing when it succeeds).
const MAX_ANSWER: u64 = 64 * 1024;
/// `SIGQUIT`'s bit in `/proc/<pid>/status`'s signal masks.
const SIGQUIT_BIT: u64 = 1 << (3 - 1);

/// Why a process was left alone, or a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JvmError {
    /// No `libjvm.so` is mapped: not a HotSpot JVM.
    NotHotSpot,
    /// The JVM does not catch `SIGQUIT` (`-Xrs`): signalling it would end it.
    NoQuitHandler,
    /// The process is gone, or its `/proc` entries cannot be read.
    Proc {
        /// The process.
        pid: u32,
        /// What the system said.
        reason: String,
    },
    /// The JVM's attach listener did not start (`-XX:+DisableAttachMechanism`, or no
    /// place to put the attach file).
    NoListener(String),
    /// The request failed, or the JVM answered with an error.
    Request(String),
}

impl std::fmt::Display for JvmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotHotSpot => write!(f, "not a HotSpot JVM (no libjvm.so mapped)"),
            Self::NoQuitHandler => write!(
                f,
                "the JVM does not catch SIGQUIT (-Xrs?): it is not signalled"
            ),
            Self::Proc { pid, reason } => write!(f, "cannot read /proc/{pid}: {reason}"),
            Self::NoListener(why) => write!(f, "the JVM's attach listener did not start: {why}"),
            Self::Request(why) => write!(f, "the JVM did not write its perf map: {why}"),
        }
    }
}

impl std::error::Error for JvmError {}

/// A process that is a HotSpot JVM that may be asked, as [`HotSpot::find`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotSpot {
    pid: u32,
    nspid: u32,
    uid: u32,
    gid: u32,
}

impl HotSpot {
    /// Process `pid`, if it is a HotSpot JVM that catches `SIGQUIT`; nothing is sent to
    /// it.
    pub fn find(pid: u32) -> Result<Self, JvmError> {
        let proc_error = |e: std::io::Error| JvmError::Proc {
            pid,
            reason: e.to_string(),
        };
        let maps = otel_ctx_reader::ProcessMaps::read(pid).map_err(|e| JvmError::Proc {
            pid,
            reason: e.to_string(),
        })?;
        let hotspot = maps.files.iter().any(|file| {
            Path::new(&file.path)
                .file_name()
                .is_some_and(|n| n == "libjvm.so")
        });
        if !hotspot {
            return Err(JvmError::NotHotSpot);
        }
        let status = procfs::status(&pid.to_string()).map_err(proc_error)?;
        let caught = status
            .field("SigCgt")
            .and_then(|mask| u64::from_str_radix(mask, 16).ok())
            .unwrap_or(0);
        if caught & SIGQUIT_BIT == 0 {
            return Err(JvmError::NoQuitHandler);
        }
        // The effective ids: the second of `Uid:` and `Gid:`.
        let effective = |name: &str| {
            status
                .field(name)
                .and_then(|v| v.split_ascii_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        };
        let missing = || JvmError::Proc {
            pid,
            reason: "no NSpid, Uid or Gid in its status".to_owned(),
        };
        Ok(Self {
            pid,
            nspid: status.ns_pid().unwrap_or(pid),
            uid: effective("Uid").ok_or_else(missing)?,
            gid: effective("Gid").ok_or_else(missing)?,
        })
    }

    /// The process.
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// Asks the JVM to write its perf map (`Compiler.perfmap`), starting its attach
    /// listener first if it does not run yet; returns once the map is written.
    pub fn write_perf_map(&self) -> Result<(), JvmError> {
        let socket = self.root_path(&format!("tmp/.java_pid{}", self.nspid));
        if !is_socket(&socket) {
            self.start_listener(&socket)?;
        }
        let mut stream =
            UnixStream::connect(&socket).map_err(|e| JvmError::Request(e.to_string()))?;
        let request = |e: std::io::Error| JvmError::Request(e.to_string());
        stream
            .set_read_timeout(Some(REQUEST_TIME))
            .map_err(request)?;
        stream
            .set_write_timeout(Some(REQUEST_TIME))
            .map_err(request)?;
        stream
            .write_all(b"1\0jcmd\0Compiler.perfmap\0\0\0")
            .map_err(request)?;
        let mut answer = String::new();
        stream
            .take(MAX_ANSWER)
            .read_to_string(&mut answer)
            .map_err(request)?;
        let (status, output) = answer.split_once('\n').unwrap_or((answer.as_str(), ""));
        match status.trim() {
            "0" if output.trim().is_empty() || !output.contains("Exception") => Ok(()),
            _ => Err(JvmError::Request(
                format!("{} {}", status.trim(), output.trim())
                    .trim()
                    .chars()
                    .take(200)
                    .collect(),
            )),
        }
    }

    /// `path` (relative) in the JVM's root.
    fn root_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/{path}", self.pid))
    }

    /// Makes the attach file (in the JVM's working directory, else its `/tmp`), sends
    /// `SIGQUIT`, waits for `socket`, and removes the attach file again.
    fn start_listener(&self, socket: &Path) -> Result<(), JvmError> {
        let name = format!(".attach_pid{}", self.nspid);
        let places = [
            PathBuf::from(format!("/proc/{}/cwd/{name}", self.pid)),
            self.root_path(&format!("tmp/{name}")),
        ];
        let mut made = None;
        let mut last = String::new();
        for place in places {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&place)
            {
                Ok(file) => {
                    // The JVM's user owns it, as HotSpot checks (root passes too); by
                    // the open file, never by a path the target could swap for a link.
                    let _ = std::os::unix::fs::fchown(&file, Some(self.uid), Some(self.gid));
                    made = Some(place);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    made = Some(place);
                    break;
                }
                Err(e) => last = format!("{}: {e}", place.display()),
            }
        }
        let Some(attach_file) = made else {
            return Err(JvmError::NoListener(last));
        };
        let signalled = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| JvmError::Request(format!("pid {}", self.pid)))
            .and_then(|pid| {
                rustix::process::kill_process(pid, rustix::process::Signal::QUIT)
                    .map_err(|e| JvmError::Request(format!("SIGQUIT: {e}")))
            });
        let deadline = Instant::now() + LISTENER_WAIT;
        let started = signalled.and_then(|()| {
            while !is_socket(socket) {
                if Instant::now() >= deadline {
                    return Err(JvmError::NoListener(format!(
                        "no {} within {} s of SIGQUIT",
                        socket.display(),
                        LISTENER_WAIT.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        });
        let _ = std::fs::remove_file(&attach_file);
        started
    }
}

/// How often a session asks its JVM for the perf map again while it samples, for what
/// the JIT compiled since.
pub const JAVA_PERF_MAP_REFRESH: Duration = Duration::from_secs(5);

/// What came of asking a JVM for its perf map during a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JavaPerfMapStats {
    /// Requests made.
    pub requests: u32,
    /// Requests the JVM answered with the map written.
    pub written: u32,
    /// The last failure, if the last request failed.
    pub last_error: Option<String>,
}

/// A JVM's perf map kept fresh while a session samples: written at once, then every
/// [`JAVA_PERF_MAP_REFRESH`] from a thread of its own (a request never holds the
/// sampling up), and once more by [`finish`](Self::finish), just before the profile
/// reads it.
#[derive(Debug)]
pub struct JavaPerfMap {
    jvm: HotSpot,
    stop: Arc<AtomicBool>,
    refresher: Option<JoinHandle<()>>,
    stats: Arc<Mutex<JavaPerfMapStats>>,
}

impl JavaPerfMap {
    /// Starts keeping `jvm`'s perf map fresh, every `every`.
    pub fn start(jvm: HotSpot, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(JavaPerfMapStats::default()));
        let refresher = {
            let (jvm, stop, stats) = (jvm.clone(), stop.clone(), stats.clone());
            std::thread::Builder::new()
                .name("java-perf-map".into())
                .spawn(move || {
                    let mut next = Instant::now();
                    // Relaxed: the flag orders nothing else; the thread only stops sooner.
                    while !stop.load(Ordering::Relaxed) {
                        if Instant::now() >= next {
                            ask(&jvm, &stats);
                            next = Instant::now() + every;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
                .ok()
        };
        Self {
            jvm,
            stop,
            refresher,
            stats,
        }
    }

    /// Stops the refreshing and asks once more, so that the map names what the JIT
    /// compiled until the end; what came of it all.
    pub fn finish(&mut self) -> JavaPerfMapStats {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.refresher.take() {
            let _ = thread.join();
        }
        ask(&self.jvm, &self.stats);
        self.stats()
    }

    /// What came of it so far.
    pub fn stats(&self) -> JavaPerfMapStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for JavaPerfMap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.refresher.take() {
            let _ = thread.join();
        }
    }
}

/// One request, counted in `stats`.
fn ask(jvm: &HotSpot, stats: &Mutex<JavaPerfMapStats>) {
    let outcome = jvm.write_perf_map();
    if let Ok(mut stats) = stats.lock() {
        stats.requests += 1;
        match outcome {
            Ok(()) => {
                stats.written += 1;
                stats.last_error = None;
            }
            Err(e) => stats.last_error = Some(e.to_string()),
        }
    }
}

/// Whether `path` is a UNIX socket itself, not a link the target made to one elsewhere
/// (the path is in the target's `/tmp`, and a link there would lead outside its root).
fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_is_not_a_jvm_is_left_alone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("start sleep");
        let pid = child.id();
        assert_eq!(HotSpot::find(pid), Err(JvmError::NotHotSpot));
        // Nothing was sent: it still sleeps, and no attach file was made.
        assert!(child.try_wait().expect("wait").is_none());
        assert!(!Path::new(&format!("/proc/{pid}/cwd/.attach_pid{pid}")).exists());
        let _ = child.kill();
        let _ = child.wait();
        assert!(matches!(HotSpot::find(pid), Err(JvmError::Proc { .. })));
    }
}
