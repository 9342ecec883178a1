//! A debuginfod client: a stripped module's debug file fetched by build id
//! (`GET <url>/buildid/<hex>/debuginfo`, else `/executable`) from the servers of
//! `DEBUGINFOD_URLS`, kept in the client cache elfutils uses, as elfutils' client does
//! (debuginfod-client-config(7)):
//!
//! - the cache is `$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`,
//!   else `~/.cache/debuginfod_client`, one folder per build id holding `debuginfo`
//!   or `executable`; a file found there is used without asking a server;
//! - a query every server answered "not found" is remembered as an empty file for
//!   `cache_miss_s` seconds (the cache's control file, default 600);
//! - `DEBUGINFOD_TIMEOUT` (seconds, default 90) bounds the wait for a server's answer,
//!   `DEBUGINFOD_MAXTIME` the whole download and `DEBUGINFOD_MAXSIZE` its bytes;
//!   where elfutils has no bound (0, the default), this client has one: 300 s and
//!   1 GiB;
//! - a server that failed (no answer, a broken transfer) is not asked again by the
//!   same client: a server that hangs costs one timeout per run, not one per module.
//!
//! It runs when a profile is about to be symbolized, never while samples are taken:
//! [`Profiler::fetch_debug_files`](crate::Profiler::fetch_debug_files). What it
//! downloads is read like any debug file: its build id checked, under the module
//! budget.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use otel_ctx_reader::files::{open_in, Root};

use super::debug_file::{self, Expect};
use super::{DebugNames, Missing, SymbolSource, UnknownCause};
use crate::module::ModuleData;
use crate::profiler::{MappingRecord, Profiler};

/// What a client asks and how long it waits. Start from
/// [`from_env`](Self::from_env) or [`new`](Self::new).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DebuginfodOptions {
    /// The servers, asked in order (`DEBUGINFOD_URLS`, space-separated).
    pub urls: Vec<String>,
    /// The cache folder.
    pub cache: PathBuf,
    /// How long a server may take to answer (`DEBUGINFOD_TIMEOUT`). Default 90 s.
    pub timeout: Duration,
    /// How long one download may take in all (`DEBUGINFOD_MAXTIME`). Default 300 s.
    pub max_time: Duration,
    /// The most bytes one download may take (`DEBUGINFOD_MAXSIZE`). Default 1 GiB.
    pub max_bytes: u64,
}

/// elfutils' default `DEBUGINFOD_TIMEOUT`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(90);
/// The bound of a whole download where elfutils has none.
const DEFAULT_MAX_TIME: Duration = Duration::from_secs(300);
/// The bound of a download's bytes where elfutils has none.
const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// elfutils' default `cache_miss_s`.
const DEFAULT_CACHE_MISS: Duration = Duration::from_secs(600);

impl DebuginfodOptions {
    /// A client of `urls` with its cache in `cache`, and the default bounds.
    pub fn new(urls: Vec<String>, cache: PathBuf) -> Self {
        Self {
            urls,
            cache,
            timeout: DEFAULT_TIMEOUT,
            max_time: DEFAULT_MAX_TIME,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }

    /// The options the environment gives, as elfutils' client reads it; `None` when
    /// `DEBUGINFOD_URLS` names no server (or no cache folder can be named).
    pub fn from_env() -> Option<Self> {
        Self::from_vars(&|name| std::env::var(name).ok())
    }

    fn from_vars(var: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        let urls: Vec<String> = var("DEBUGINFOD_URLS")?
            .split_whitespace()
            .map(|u| u.trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return None;
        }
        let cache = match var("DEBUGINFOD_CACHE_PATH").filter(|p| !p.is_empty()) {
            Some(path) => PathBuf::from(path),
            None => match var("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
                Some(xdg) => Path::new(&xdg).join("debuginfod_client"),
                None => Path::new(&var("HOME")?).join(".cache/debuginfod_client"),
            },
        };
        // Seconds; 0 or less (or not a number) means elfutils' "no bound", which here
        // is the default bound.
        let seconds = |name: &str| -> Option<Duration> {
            let n: i64 = var(name)?.trim().parse().ok()?;
            (n > 0).then(|| Duration::from_secs(n as u64))
        };
        let mut options = Self::new(urls, cache);
        options.timeout = seconds("DEBUGINFOD_TIMEOUT").unwrap_or(DEFAULT_TIMEOUT);
        options.max_time = seconds("DEBUGINFOD_MAXTIME").unwrap_or(DEFAULT_MAX_TIME);
        if let Some(bytes) = var("DEBUGINFOD_MAXSIZE").and_then(|b| b.trim().parse::<u64>().ok()) {
            if bytes > 0 {
                options.max_bytes = bytes;
            }
        }
        Some(options)
    }

    /// Sets [`timeout`](Self::timeout).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`max_time`](Self::max_time).
    #[must_use]
    pub fn with_max_time(mut self, max: Duration) -> Self {
        self.max_time = max;
        self
    }

    /// Sets [`max_bytes`](Self::max_bytes).
    #[must_use]
    pub fn with_max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }
}

/// A file a client found: in its cache, or fetched now.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fetched {
    /// The file in the cache.
    pub path: PathBuf,
    /// The server it came from (`cache` when it was in the cache already).
    pub url: String,
}

/// The two artifacts asked for, in order.
const ARTIFACTS: [&str; 2] = ["debuginfo", "executable"];

/// A debuginfod client: its options, and the servers that failed it.
pub struct Debuginfod {
    options: DebuginfodOptions,
    agent: ureq::Agent,
    /// Servers that failed (no answer, a broken transfer), with why: not asked again.
    failed: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Debuginfod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Debuginfod")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Debuginfod {
    /// A client with `options`.
    pub fn new(options: DebuginfodOptions) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(options.timeout))
            .timeout_send_request(Some(options.timeout))
            .timeout_recv_response(Some(options.timeout))
            .timeout_global(Some(options.max_time))
            .http_status_as_error(false)
            .user_agent(concat!("otel-ctx-profile/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self {
            options,
            agent,
            failed: Mutex::new(HashMap::new()),
        }
    }

    /// A client configured by the environment; `None` without `DEBUGINFOD_URLS`.
    pub fn from_env() -> Option<Self> {
        DebuginfodOptions::from_env().map(Self::new)
    }

    /// Its options.
    pub fn options(&self) -> &DebuginfodOptions {
        &self.options
    }

    /// The debug file (else the executable) of build id `build_id`: from the cache, or
    /// fetched from the first server that has it, by `until` (no request is made past
    /// it, and none outlives it). Why not, when no server has it.
    pub fn fetch(&self, build_id: &[u8], until: Instant) -> Result<Fetched, String> {
        let id = crate::hex(build_id);
        if id.is_empty() {
            return Err("no build id".into());
        }
        let dir = self.options.cache.join(&id);
        let mut reasons = Vec::new();
        for artifact in ARTIFACTS {
            let path = dir.join(artifact);
            match cached(&path, self.cache_miss()) {
                Cached::File => {
                    return Ok(Fetched {
                        path,
                        url: "cache".into(),
                    })
                }
                Cached::Miss => {
                    reasons.push(format!("{artifact}: not found (a remembered miss)"));
                    continue;
                }
                Cached::Nothing => {}
            }
            let mut answered = 0;
            for url in &self.options.urls {
                if let Some(why) = lock(&self.failed).get(url) {
                    reasons.push(format!("{url}: skipped, it failed before ({why})"));
                    continue;
                }
                let request = format!("{url}/buildid/{id}/{artifact}");
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    reasons.push(format!(
                        "{request}: not asked, the time for fetching ran out"
                    ));
                    return Err(reasons.join("; "));
                }
                match self.download(&request, &dir, &path, left) {
                    Ok(()) => {
                        return Ok(Fetched {
                            path,
                            url: url.clone(),
                        })
                    }
                    Err(Failure::NotFound) => {
                        answered += 1;
                        reasons.push(format!("{request}: not found"));
                    }
                    Err(Failure::Server(why)) => {
                        reasons.push(format!("{request}: {why}"));
                        lock(&self.failed).insert(url.clone(), why);
                    }
                }
            }
            if answered == self.options.urls.len() {
                // Every server said it has none: remembered, as elfutils does.
                let _ = std::fs::create_dir_all(&dir).and_then(|()| File::create(&path));
            }
        }
        Err(reasons.join("; "))
    }

    /// `cache_miss_s` of the cache, else elfutils' default.
    fn cache_miss(&self) -> Duration {
        std::fs::read_to_string(self.options.cache.join("cache_miss_s"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(DEFAULT_CACHE_MISS, Duration::from_secs)
    }

    /// GETs `url` into `path` (through a temporary file in `dir`), within the bounds and
    /// within `left`, the time left for fetching.
    fn download(&self, url: &str, dir: &Path, path: &Path, left: Duration) -> Result<(), Failure> {
        let started = Instant::now();
        let bound = left.min(self.options.max_time);
        let mut response = self
            .agent
            .get(url)
            .config()
            .timeout_global(Some(bound))
            .build()
            .call()
            .map_err(|e| Failure::Server(describe(&e, &self.options, left)))?;
        match response.status().as_u16() {
            200 => {}
            404 => return Err(Failure::NotFound),
            status => return Err(Failure::Server(format!("the server answered {status}"))),
        }
        let max = self.options.max_bytes;
        if let Some(length) = response.body().content_length() {
            if length > max {
                return Err(Failure::Server(format!(
                    "{length} bytes, more than the {max} a download may take (DEBUGINFOD_MAXSIZE)"
                )));
            }
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Server(format!("cannot create {}: {e}", dir.display())))?;
        let temporary = dir.join(format!(".download.{}", std::process::id()));
        let copied = (|| -> Result<(), String> {
            let mut out = File::create(&temporary)
                .map_err(|e| format!("cannot create {}: {e}", temporary.display()))?;
            let mut body = response.body_mut().with_config().limit(max).reader();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match body.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => return Err(describe_read(&e, max, started, &self.options, left)),
                };
                out.write_all(&buf[..n])
                    .map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
            }
            out.sync_all().ok();
            std::fs::rename(&temporary, path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        })();
        if copied.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        copied.map_err(Failure::Server)
    }
}

/// Why a server gave nothing.
enum Failure {
    /// It answered that it has no such file.
    NotFound,
    /// It failed: no answer, an error, a transfer past the bounds.
    Server(String),
}

/// What the cache holds of an artifact.
enum Cached {
    File,
    /// A remembered miss, still fresh.
    Miss,
    Nothing,
}

fn cached(path: &Path, cache_miss: Duration) -> Cached {
    let Ok(meta) = std::fs::metadata(path) else {
        return Cached::Nothing;
    };
    if meta.is_file() && meta.len() > 0 {
        return Cached::File;
    }
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::MAX);
    if meta.is_file() && age < cache_miss {
        return Cached::Miss;
    }
    // A stale miss: asked again.
    let _ = std::fs::remove_file(path);
    Cached::Nothing
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A failed request in words: which bound it ran into, or the error.
fn describe(e: &ureq::Error, options: &DebuginfodOptions, left: Duration) -> String {
    match e {
        ureq::Error::Timeout(_) if left < options.timeout.min(options.max_time) => format!(
            "no answer within the {:.1} s left for fetching",
            left.as_secs_f64()
        ),
        ureq::Error::Timeout(_) => format!(
            "no answer within {} s (DEBUGINFOD_TIMEOUT)",
            options.timeout.as_secs()
        ),
        other => other.to_string(),
    }
}

/// A failed read of a body in words.
fn describe_read(
    e: &std::io::Error,
    max: u64,
    started: Instant,
    options: &DebuginfodOptions,
    left: Duration,
) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<ureq::Error>());
    match inner {
        Some(ureq::Error::Timeout(_)) if left < options.max_time => format!(
            "the download took longer than the {:.1} s left for fetching, stopped after {:.1} s",
            left.as_secs_f64(),
            started.elapsed().as_secs_f64()
        ),
        Some(ureq::Error::BodyExceedsLimit(_)) => {
            format!("the body went past the {max} bytes a download may take (DEBUGINFOD_MAXSIZE)")
        }
        Some(ureq::Error::Timeout(_)) => format!(
            "the download took longer than {} s (DEBUGINFOD_MAXTIME), stopped after {:.1} s",
            options.max_time.as_secs(),
            started.elapsed().as_secs_f64()
        ),
        _ => format!("the transfer broke: {e}"),
    }
}

/// What asking debuginfod for one module's debug file gave.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DebuginfodFetch {
    /// The module's path in the target.
    pub module: String,
    /// Its build id, lowercase hex.
    pub build_id: String,
    /// Where its names now come from, or why debuginfod gave none.
    pub outcome: Result<SymbolSource, String>,
}

impl Profiler {
    /// Asks `client` for the debug files of the modules that have frames in the
    /// profile so far and still lack names (stripped, no debug file found on disk; with
    /// [`lines`](crate::ProfileOptions::lines), no DWARF), and reads what it fetches:
    /// the frames of the next [`profile`](Self::profile) get those names. A failure is
    /// remembered by the module: its unknown frames count as
    /// [`UnknownCause::Debuginfod`].
    ///
    /// Waits on the network (within the client's bounds, and until `until` at the
    /// latest: a module not asked by then is left `[unknown]`, with the reason): call it
    /// once sampling is done, before the profile is made, never between samples.
    pub fn fetch_debug_files(&self, client: &Debuginfod, until: Instant) -> Vec<DebuginfodFetch> {
        let mut used: HashSet<u32> = HashSet::new();
        for ((stack, _), _) in self.aggregate.entries() {
            used.extend(self.aggregate.stack(stack).iter().map(|f| f.mapping));
        }
        let mut asked: Vec<*const ModuleData> = Vec::new();
        let mut fetches = Vec::new();
        for id in used {
            let Some(MappingRecord {
                module: Ok(module),
                path,
                ..
            }) = self.mappings.get(id as usize)
            else {
                continue;
            };
            let Some(build_id) = module.build_id.as_deref() else {
                continue;
            };
            if asked.contains(&Rc::as_ptr(module)) || !module.wants_names(self.options.lines) {
                continue;
            }
            asked.push(Rc::as_ptr(module));
            let outcome = client
                .fetch(build_id, until)
                .map_err(|reason| {
                    Missing::new(UnknownCause::Debuginfod, format!("debuginfod: {reason}"))
                })
                .and_then(|fetched| self.read_fetched(&fetched, build_id));
            let outcome = match outcome {
                Ok(found) => {
                    let source = found.source.clone();
                    module.complete(found);
                    Ok(source)
                }
                Err(missing) => {
                    let reason = missing.reason.clone();
                    module.record_missing(missing);
                    Err(reason)
                }
            };
            fetches.push(DebuginfodFetch {
                module: path.clone(),
                build_id: crate::hex(build_id),
                outcome,
            });
        }
        fetches
    }

    /// Reads a file debuginfod gave, as any debug file: its build id checked, under
    /// the module budget.
    fn read_fetched(&self, fetched: &Fetched, build_id: &[u8]) -> Result<DebugNames, Missing> {
        let failed = |what: String| Missing::new(UnknownCause::Debuginfod, what);
        let path = std::path::absolute(&fetched.path)
            .map_err(|e| failed(format!("{}: {e}", fetched.path.display())))?;
        let path = path
            .to_str()
            .ok_or_else(|| failed(format!("{}: not a UTF-8 path", path.display())))?;
        let opened = open_in(Root::Host, path).map_err(|e| failed(format!("{path} {e}")))?;
        let source = SymbolSource::Debuginfod {
            url: fetched.url.clone(),
            path: path.to_owned(),
        };
        let at = format!("{path} (from {})", fetched.url);
        debug_file::read(
            opened,
            &at,
            source,
            Expect::BuildId(build_id),
            self.options.module_budget,
            self.options.debug_info,
        )
        .map_err(|missing| match missing.cause {
            UnknownCause::Budget => missing,
            _ => Missing::new(UnknownCause::Debuginfod, missing.reason),
        })
    }
}

impl ModuleData {
    /// Whether its names lack what a debug file would give: for a debuginfod
    /// request. With `lines`, DWARF is wanted too.
    pub fn wants_names(&self, lines: bool) -> bool {
        let names = self.names.borrow();
        !names.full || (lines && names.dwarf.is_none())
    }

    /// Adds the names of a source found after the module was read (debuginfod), and
    /// forgets the addresses symbolized without them.
    pub fn complete(&self, found: DebugNames) {
        self.names.borrow_mut().absorb(found);
        self.symbolized.borrow_mut().clear();
    }

    /// Records that a source asked after the module was read (debuginfod) failed, if
    /// the module still has no full table.
    pub fn record_missing(&self, missing: Missing) {
        let mut names = self.names.borrow_mut();
        if !names.full {
            names.missing = Some(missing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_the_environment() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(DebuginfodOptions::from_vars(&vars(&[("HOME", "/h")])), None);
        assert_eq!(
            DebuginfodOptions::from_vars(&vars(&[("DEBUGINFOD_URLS", "  "), ("HOME", "/h")])),
            None
        );
        let o = DebuginfodOptions::from_vars(&vars(&[
            ("DEBUGINFOD_URLS", "http://a/ https://b"),
            ("HOME", "/h"),
        ]))
        .unwrap();
        assert_eq!(o.urls, ["http://a", "https://b"]);
        assert_eq!(o.cache, Path::new("/h/.cache/debuginfod_client"));
        assert_eq!(
            (o.timeout, o.max_time, o.max_bytes),
            (DEFAULT_TIMEOUT, DEFAULT_MAX_TIME, DEFAULT_MAX_BYTES)
        );
        let o = DebuginfodOptions::from_vars(&vars(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("XDG_CACHE_HOME", "/x"),
            ("DEBUGINFOD_TIMEOUT", "5"),
            ("DEBUGINFOD_MAXTIME", "0"),
            ("DEBUGINFOD_MAXSIZE", "1000"),
        ]))
        .unwrap();
        assert_eq!(o.cache, Path::new("/x/debuginfod_client"));
        assert_eq!(
            (o.timeout, o.max_time, o.max_bytes),
            (Duration::from_secs(5), DEFAULT_MAX_TIME, 1000)
        );
        let o = DebuginfodOptions::from_vars(&vars(&[
            ("DEBUGINFOD_URLS", "http://a"),
            ("DEBUGINFOD_CACHE_PATH", "/c"),
            ("DEBUGINFOD_TIMEOUT", "-1"),
        ]))
        .unwrap();
        assert_eq!(
            (o.cache.as_path(), o.timeout),
            (Path::new("/c"), DEFAULT_TIMEOUT)
        );
    }
}
