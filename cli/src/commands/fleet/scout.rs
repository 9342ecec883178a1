//! The fleet's discovery, on a thread of its own so that its cost never holds up the
//! sampling: every `--rescan` it scans `/proc` for processes that publish a process
//! context, and at the sampling loop's request it looks at one process (a publication
//! event). For each new publisher it does what following it costs most, reading its maps,
//! its process context and its modules' TLS ([`prepare`]), and hands the result over; on
//! a host with large processes that is a read of a million-line maps file, which must
//! not stop the loop that empties the sampler's ring.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use otel_ctx_reader::{
    ProcessContextReader, ProcessMaps, ReaderOptions, Snapshot, ThreadError, ThreadReader,
    ThreadReaderOptions,
};

use crate::commands::Failure;
use otel_ctx_reader::procfs::start_time;

/// A publisher, ready to follow: what reading it cost, done.
pub struct Found {
    pub pid: u32,
    pub start_time: u64,
    pub maps: ProcessMaps,
    pub context: ProcessContextReader,
    pub snapshot: Snapshot,
    /// Its thread reader; `None` when it publishes no thread contexts.
    pub reader: Option<ThreadReader>,
}

/// What the scout reports.
pub enum Report {
    /// A new publisher.
    Found(Box<Found>),
    /// A scan's publishers (the loop reads again those it follows and the scan missed).
    Scanned(Vec<u32>),
    /// A process that publishes a context but could not be read, and why.
    Refused(u32, String),
}

/// Reads what following `pid` needs; `Failure::Finding` when it publishes no context.
pub fn prepare(pid: u32) -> Result<Found, Failure> {
    let maps = crate::commands::show::read_maps(pid)?;
    let start_time =
        start_time(pid).ok_or_else(|| Failure::Unusable(format!("process {pid} has exited")))?;
    let mut context = ProcessContextReader::from_maps(&maps, ReaderOptions::default())?;
    let snapshot = context.read()?;
    let reader = open_reader(&maps);
    Ok(Found {
        pid,
        start_time,
        maps,
        context,
        snapshot,
        reader,
    })
}

/// A thread reader of the process whose maps are `maps`, if it publishes thread
/// contexts (`None`: it exports no `otel_thread_ctx_v1`, or it cannot be located); a
/// process that announces no known schema yet is still read, its attributes named by
/// index until its key map comes.
pub fn open_reader(maps: &ProcessMaps) -> Option<ThreadReader> {
    match ThreadReader::from_maps(maps, ThreadReaderOptions::default()) {
        Ok(reader) => Some(reader),
        Err(ThreadError::Schema { .. }) => ThreadReader::from_maps(
            maps,
            ThreadReaderOptions::default().with_require_known_schema(false),
        )
        .ok(),
        Err(_) => None,
    }
}

/// How long a process handed over is not handed over again (the loop adopts it within
/// a tick).
const HANDED: Duration = Duration::from_secs(5);

/// The discovery thread's handle: requests go in, reports come out.
pub struct Scout {
    requests: Sender<u32>,
    reports: Receiver<Report>,
    /// The processes the loop follows, which the scout leaves alone.
    followed: Arc<Mutex<HashSet<u32>>>,
    scans: Arc<Mutex<u64>>,
}

impl Scout {
    /// Starts the thread: a scan now, then every `every`.
    pub fn start(every: Duration, own_pid: u32) -> Result<Self, String> {
        let (requests, asked) = mpsc::channel();
        let (report, reports) = mpsc::channel();
        let followed = Arc::new(Mutex::new(HashSet::from([own_pid])));
        let scans = Arc::new(Mutex::new(0));
        let (shared, counted) = (followed.clone(), scans.clone());
        std::thread::Builder::new()
            .name("discovery".into())
            .spawn(move || run(&asked, &report, &shared, &counted, every))
            .map_err(|e| format!("cannot start the discovery thread: {e}"))?;
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

    /// The loop follows `pid` now (or no longer).
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

fn run(
    asked: &Receiver<u32>,
    report: &Sender<Report>,
    followed: &Mutex<HashSet<u32>>,
    scans: &Mutex<u64>,
    every: Duration,
) {
    let mut handed: HashMap<u32, Instant> = HashMap::new();
    let mut next_scan = Instant::now();
    loop {
        let now = Instant::now();
        handed.retain(|_, at| now.duration_since(*at) < HANDED);
        let is_new = |pid: u32, handed: &HashMap<u32, Instant>| {
            !handed.contains_key(&pid)
                && !followed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&pid)
        };
        if now >= next_scan {
            next_scan = now + every;
            *scans.lock().unwrap_or_else(|e| e.into_inner()) += 1;
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
                if is_new(pid, &handed) && !hand_over(pid, report, &mut handed) {
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
                if is_new(pid, &handed) && !hand_over(pid, report, &mut handed) {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // The loop has ended.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Prepares `pid` and reports it; `false` when the loop has ended.
fn hand_over(pid: u32, report: &Sender<Report>, handed: &mut HashMap<u32, Instant>) -> bool {
    let message = match prepare(pid) {
        Ok(found) => {
            handed.insert(pid, Instant::now());
            Report::Found(Box::new(found))
        }
        // No context after all (a name without a publication, or gone): nothing to say.
        Err(Failure::Finding(_)) => return true,
        Err(Failure::Unusable(why)) if start_time(pid).is_some() => Report::Refused(pid, why),
        Err(Failure::Unusable(_)) => return true,
    };
    report.send(message).is_ok()
}
