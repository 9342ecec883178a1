//! A fleet's discovery, on a thread of its own so that its cost never holds up the
//! sampling: every rescan interval it scans `/proc` for processes that publish a process
//! context, and at the fleet's request it looks at one process (a publication event).
//! For each new publisher it does what following it costs most (reading its maps, its
//! process context and its modules' TLS: [`Found::prepare`]) and hands the result over; on
//! a host with large processes that is a read of a million-line maps file, which must
//! not stop the loop that empties the sampler's ring.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use otel_ctx_reader::process::{ReaderOptions, Snapshot};
use otel_ctx_reader::{Error, ProcessContextReader};
use otel_ctx_sampler::PreparedProcess;
use otel_ctx_sampler::{SamplerError, SamplerOptions};

/// A publisher, ready to follow: what reading it cost, done.
pub(super) struct Found {
    pub prepared: PreparedProcess,
    pub context: ProcessContextReader,
    pub snapshot: Snapshot,
}

impl Found {
    /// Reads what following `pid` needs: its maps, its thread reader, its process
    /// context. `Ok(None)` when it publishes no process context.
    pub fn prepare(pid: u32, options: &SamplerOptions) -> Result<Option<Self>, SamplerError> {
        let prepared = PreparedProcess::open(pid, options)?;
        let mut context =
            match ProcessContextReader::from_maps(&prepared.maps, ReaderOptions::default()) {
                Ok(context) => context,
                Err(Error::NoContext { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
        let snapshot = match context.read() {
            Ok(snapshot) => snapshot,
            Err(Error::NoContext { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(Some(Self {
            prepared,
            context,
            snapshot,
        }))
    }
}

/// What the scout reports.
pub(super) enum Report {
    /// A new publisher.
    Found(Box<Found>),
    /// A scan's publishers (the fleet reads again those it follows and the scan missed).
    Scanned(Vec<u32>),
    /// A process that publishes a context but could not be read, and why.
    Refused(u32, String),
}

/// How long a process handed over is not handed over again (the fleet adopts it within
/// a step).
const HANDED: Duration = Duration::from_secs(5);

/// The discovery thread's handle: requests go in, reports come out.
pub(super) struct Scout {
    requests: Sender<u32>,
    reports: Receiver<Report>,
    /// The processes the fleet follows, which the scout leaves alone.
    followed: Arc<Mutex<HashSet<u32>>>,
    scans: Arc<Mutex<u64>>,
}

/// What the discovery thread shares with its handle.
struct Shared {
    followed: Arc<Mutex<HashSet<u32>>>,
    scans: Arc<Mutex<u64>>,
    options: SamplerOptions,
    every: Duration,
}

impl Scout {
    /// Starts the thread: a scan now, then every `every`; the fleet's own process is
    /// never handed over.
    pub fn start(every: Duration, own_pid: u32, options: SamplerOptions) -> std::io::Result<Self> {
        let (requests, asked) = mpsc::channel();
        let (report, reports) = mpsc::channel();
        let followed = Arc::new(Mutex::new(HashSet::from([own_pid])));
        let scans = Arc::new(Mutex::new(0));
        let shared = Shared {
            followed: followed.clone(),
            scans: scans.clone(),
            options,
            every,
        };
        std::thread::Builder::new()
            .name("discovery".into())
            .spawn(move || run(&asked, &report, &shared))?;
        Ok(Self {
            requests,
            reports,
            followed,
            scans,
        })
    }

    /// Asks for a look at `pid` (a publication event of a process not followed).
    pub fn look(&self, pid: u32) {
        let _ = self.requests.send(pid);
    }

    /// The next report, if one is waiting.
    pub fn report(&self) -> Option<Report> {
        self.reports.try_recv().ok()
    }

    /// The fleet follows `pid` now (or no longer).
    pub fn set_followed(&self, pid: u32, followed: bool) {
        let mut set = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        if followed {
            set.insert(pid);
        } else {
            set.remove(&pid);
        }
    }

    /// Scans of `/proc` so far.
    pub fn scans(&self) -> u64 {
        *self.scans.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn run(asked: &Receiver<u32>, report: &Sender<Report>, shared: &Shared) {
    let mut handed: HashMap<u32, Instant> = HashMap::new();
    let mut next_scan = Instant::now();
    loop {
        let now = Instant::now();
        handed.retain(|_, at| now.duration_since(*at) < HANDED);
        let is_new = |pid: u32, handed: &HashMap<u32, Instant>| {
            !handed.contains_key(&pid)
                && !shared
                    .followed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&pid)
        };
        if now >= next_scan {
            next_scan = now + shared.every;
            *shared.scans.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            let Ok(scan) = otel_ctx_reader::scan() else {
                continue;
            };
            let publishers: Vec<u32> = scan
                .entries
                .iter()
                .filter(|e| e.context.is_ok())
                .map(|e| e.pid)
                .collect();
            for &pid in &publishers {
                if is_new(pid, &handed) && !hand_over(pid, report, &mut handed, shared) {
                    return;
                }
            }
            if report.send(Report::Scanned(publishers)).is_err() {
                return;
            }
            continue;
        }
        match asked.recv_timeout(next_scan.saturating_duration_since(now)) {
            Ok(pid) => {
                if is_new(pid, &handed) && !hand_over(pid, report, &mut handed, shared) {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // The fleet has ended.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Prepares `pid` and reports it; `false` when the fleet has ended.
fn hand_over(
    pid: u32,
    report: &Sender<Report>,
    handed: &mut HashMap<u32, Instant>,
    shared: &Shared,
) -> bool {
    let message = match Found::prepare(pid, &shared.options) {
        Ok(Some(found)) => {
            handed.insert(pid, Instant::now());
            Report::Found(Box::new(found))
        }
        // No context after all (a name without a publication): nothing to say.
        Ok(None) => return true,
        // Gone meanwhile: nothing to say either.
        Err(_) if otel_ctx_reader::procfs::start_time(pid).is_none() => return true,
        Err(e) => Report::Refused(pid, e.to_string()),
    };
    report.send(message).is_ok()
}
