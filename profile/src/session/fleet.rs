//! The profiles of many processes from one sampler: every process on the host that
//! publishes a process context (found by a scan of `/proc` at the start and every rescan
//! interval, on a discovery thread, and, with eBPF, by the publication hook as they
//! publish), or the processes it is told to follow. Each has its own resource, key map,
//! modules and aggregate; [`FleetProfiler::take_profiles`] ends an interval with one
//! profile per process. A process that exits, or stops publishing, is dropped after its
//! last samples are taken.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use otel_ctx_reader::process::{ReaderOptions, Snapshot};
use otel_ctx_reader::{ProcessContextReader, ProcessMaps};
use otel_ctx_sampler::PreparedProcess;
use otel_ctx_sampler::{Following, Sampler, SamplerError, SamplerOptions};

use super::process::SessionOptions;
use super::scout::{Found, Report, Scout};
use crate::{ModuleCache, Profile, ProfileOptions, Profiler};

/// How soon after a publication event its process is read (a burst of updates is read
/// once).
#[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
const EVENT_DELAY: Duration = Duration::from_millis(20);

/// The most profiles of exited processes kept until the next interval ends.
const MAX_FINISHED: usize = 1024;

/// How a [`FleetProfiler`] finds its processes, samples and profiles them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetOptions {
    /// The sampler and the profiles.
    pub session: SessionOptions,
    /// Scan `/proc` for publishers at the start and this often, on a discovery thread;
    /// `None` (the default) follows only the processes given to
    /// [`FleetProfiler::follow`].
    pub discover: Option<Duration>,
    /// With discovery and eBPF: also find publishers as they publish, with the
    /// publication hook (a BPF program on `prctl`). Default `true`.
    pub publication_hook: bool,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            session: SessionOptions::default(),
            discover: None,
            publication_hook: true,
        }
    }
}

impl FleetOptions {
    /// Sets [`session`](Self::session).
    #[must_use]
    pub fn with_session(mut self, session: SessionOptions) -> Self {
        self.session = session;
        self
    }

    /// Sets [`discover`](Self::discover).
    #[must_use]
    pub fn with_discover(mut self, every: Option<Duration>) -> Self {
        self.discover = every;
        self
    }

    /// Sets [`publication_hook`](Self::publication_hook).
    #[must_use]
    pub fn with_publication_hook(mut self, hook: bool) -> Self {
        self.publication_hook = hook;
        self
    }
}

/// What happened to the fleet's processes so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetCounts {
    /// Processes followed, in all.
    pub followed: u64,
    /// Those dropped because they exited (or another took their id).
    pub exited: u64,
    /// Those dropped because they stopped publishing a process context.
    pub unpublished: u64,
    /// Publishers that could not be followed.
    pub refused: u64,
    /// Why the last of them could not be.
    pub last_refusal: Option<String>,
    /// Publication events the hook reported.
    pub events: u64,
    /// Scans of `/proc` the discovery thread made.
    pub scans: u64,
}

/// One followed process, as the summary describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Member {
    /// The process.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// Its resource's `service.name`.
    pub service: Option<String>,
    /// Followed for its stacks only (no thread contexts).
    pub stacks_only: bool,
}

/// What the fleet keeps of one followed process.
struct Followed {
    comm: String,
    service: Option<String>,
    profiler: Profiler,
    /// Its process context's reader (`None`: it publishes none), and the timestamp of
    /// the last snapshot taken.
    context: Option<ProcessContextReader>,
    published_at: u64,
}

/// The profiles of many processes from one sampler: each process publishing a context
/// (found by scans of `/proc` and, with eBPF, as it publishes), or those it is told to
/// follow, with its own resource, key map, modules and aggregate.
pub struct FleetProfiler {
    sampler: Sampler,
    #[cfg(feature = "ebpf")]
    hook: Option<otel_ctx_sampler::ebpf::PublicationHook>,
    /// Why the publication hook is not used, when discovery asked for it.
    hook_refusal: Option<String>,
    scout: Option<Scout>,
    processes: HashMap<u32, Followed>,
    cache: ModuleCache,
    profile_options: ProfileOptions,
    sampler_options: SamplerOptions,
    /// Processes to read soon (publication events), by when.
    pending: HashMap<u32, Instant>,
    /// The last profiles of processes gone since the last interval ended.
    finished: Vec<Profile>,
    counts: FleetCounts,
    own_pid: u32,
    /// The debuginfod client (`DEBUGINFOD_URLS`), kept for the fleet's life: a server
    /// that failed is not asked again, and how long each profile's fetch may take.
    #[cfg(feature = "debuginfod")]
    debuginfod: Option<(crate::Debuginfod, Duration)>,
    /// What the last fetch asked debuginfod for, and got.
    #[cfg(feature = "debuginfod")]
    fetches: Vec<crate::DebuginfodFetch>,
}

impl std::fmt::Debug for FleetProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetProfiler")
            .field("sampler", &self.sampler)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl FleetProfiler {
    /// Starts the sampler (and with discovery, the discovery thread and the publication
    /// hook); no process is followed until [`step`](Self::step) adopts the publishers
    /// discovery finds, or [`follow`](Self::follow) is called.
    pub fn start(options: FleetOptions) -> Result<Self, SamplerError> {
        #[cfg(feature = "debuginfod")]
        let debuginfod = (!options.session.debuginfod_time.is_zero())
            .then(crate::Debuginfod::from_env)
            .flatten()
            .map(|client| (client, options.session.debuginfod_time));
        // The sampler runs while a profile waits for debuginfod: its ring holds that
        // wait too.
        #[cfg(feature = "debuginfod")]
        let waits = debuginfod.as_ref().map_or(0, |(_, time)| {
            let seconds = time.as_secs() + u64::from(time.subsec_nanos() > 0);
            u32::try_from(seconds).unwrap_or(u32::MAX)
        });
        #[cfg(not(feature = "debuginfod"))]
        let waits = 0;
        let sampler_options = options.session.sampler;
        let sampler = Sampler::new(
            sampler_options.with_ring_seconds(sampler_options.ring_seconds.saturating_add(waits)),
        )?;
        let own_pid = std::process::id();
        let scout = match options.discover {
            Some(every) => Some(
                Scout::start(every, own_pid, *sampler.options())
                    .map_err(|e| otel_ctx_reader::Error::from_io(own_pid, "start a thread", e))?,
            ),
            None => None,
        };
        let mut fleet = Self {
            profile_options: options.session.profile_options(),
            sampler_options: *sampler.options(),
            sampler,
            #[cfg(feature = "ebpf")]
            hook: None,
            hook_refusal: None,
            scout,
            processes: HashMap::new(),
            cache: ModuleCache::default(),
            pending: HashMap::new(),
            finished: Vec::new(),
            counts: FleetCounts::default(),
            own_pid,
            #[cfg(feature = "debuginfod")]
            debuginfod,
            #[cfg(feature = "debuginfod")]
            fetches: Vec::new(),
        };
        if options.discover.is_some() && options.publication_hook {
            fleet.start_hook();
        }
        Ok(fleet)
    }

    #[cfg(feature = "ebpf")]
    fn start_hook(&mut self) {
        match otel_ctx_sampler::ebpf::PublicationHook::new() {
            Ok(hook) => self.hook = Some(hook),
            Err(e) => self.hook_refusal = Some(e.to_string()),
        }
    }

    #[cfg(not(feature = "ebpf"))]
    fn start_hook(&mut self) {
        self.hook_refusal = Some("built without the eBPF sampler (feature `ebpf`)".into());
    }

    /// The sampler: how it samples, its counts.
    pub const fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// Why the publication hook is not used, when discovery asked for it: new publishers
    /// are then found by the scans alone.
    pub fn hook_refusal(&self) -> Option<&str> {
        self.hook_refusal.as_deref()
    }

    /// What happened to the processes so far.
    pub fn counts(&self) -> FleetCounts {
        let mut counts = self.counts.clone();
        counts.scans = self.scout.as_ref().map_or(0, Scout::scans);
        counts
    }

    /// The processes followed now, by process id.
    pub fn members(&self) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .processes
            .iter()
            .map(|(&pid, f)| Member {
                pid,
                comm: f.comm.clone(),
                service: f.service.clone(),
                stacks_only: self.sampler.reader(pid).is_none(),
            })
            .collect();
        members.sort_by_key(|m| m.pid);
        members
    }

    /// Starts following process `pid`, whatever it publishes: its thread contexts
    /// label its samples if it has them, its process context (if any) is its profiles'
    /// resource.
    pub fn follow(&mut self, pid: u32) -> Result<Following, SamplerError> {
        let prepared = PreparedProcess::open(pid, &self.sampler_options)?;
        let context = ProcessContextReader::from_maps(&prepared.maps, ReaderOptions::default())
            .ok()
            .and_then(|mut reader| {
                let snapshot = reader.read().ok()?;
                Some((reader, snapshot))
            });
        self.adopt(prepared, context)
    }

    fn adopt(
        &mut self,
        prepared: PreparedProcess,
        context: Option<(ProcessContextReader, Snapshot)>,
    ) -> Result<Following, SamplerError> {
        let pid = prepared.pid;
        let (following, maps) = self.sampler.adopt(prepared)?;
        let mut profiler =
            Profiler::with_cache(pid, self.profile_options.clone(), self.cache.clone());
        profiler.update_maps(&maps);
        let (context, snapshot) = match context {
            Some((reader, snapshot)) => (Some(reader), Some(snapshot)),
            None => (None, None),
        };
        profiler.set_process_context(snapshot.as_ref());
        let replaced = self.processes.insert(
            pid,
            Followed {
                comm: otel_ctx_reader::procfs::comm(pid).unwrap_or_default(),
                service: snapshot
                    .as_ref()
                    .and_then(|s| s.context.service_name().map(str::to_owned)),
                profiler,
                context,
                published_at: snapshot.map_or(0, |s| s.monotonic_published_at_ns),
            },
        );
        if replaced.is_none() {
            self.counts.followed += 1;
        }
        if let Some(scout) = &self.scout {
            scout.set_followed(pid, true);
        }
        Ok(following)
    }

    /// One step, at most `wait` long: the samples taken meanwhile are profiled, the
    /// discovery thread's new publishers adopted, the publication events read, the
    /// processes that changed read again and those that exited dropped.
    pub fn step(&mut self, wait: Duration) -> Result<(), SamplerError> {
        let processes = &mut self.processes;
        let step = self.sampler.step(wait, |sample| {
            processes
                .get_mut(&sample.pid)
                .is_some_and(|followed| followed.profiler.add(sample).outside_modules)
        })?;
        for maps in &step.maps {
            self.update_maps(maps);
        }
        for pid in step.exited {
            self.drop_process(pid, true);
        }
        self.take_reports();
        self.take_events();
        Ok(())
    }

    fn update_maps(&mut self, maps: &ProcessMaps) {
        if let Some(followed) = self.processes.get_mut(&maps.pid) {
            followed.profiler.update_maps(maps);
        }
    }

    /// Reads `pid`'s process context again after a publication event or a scan that
    /// missed it: its resource may have changed, or it may have stopped publishing.
    fn refresh(&mut self, pid: u32) {
        let Some(followed) = self.processes.get_mut(&pid) else {
            if let Some(scout) = &self.scout {
                scout.look(pid);
            }
            return;
        };
        // Its maps and key map too, at the sampler's next step.
        self.sampler.suspect_changes(pid);
        let changed = match followed.context.as_mut() {
            Some(reader) => reader.read_if_changed(followed.published_at),
            None => Err(otel_ctx_reader::Error::NoContext { pid }),
        };
        let snapshot = match changed {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return,
            Err(_) => {
                // Republished elsewhere, or unpublished: look for it from the maps.
                let found = ProcessMaps::read(pid).ok().and_then(|maps| {
                    let mut reader =
                        ProcessContextReader::from_maps(&maps, ReaderOptions::default()).ok()?;
                    let snapshot = reader.read().ok()?;
                    Some((reader, snapshot))
                });
                match found {
                    Some((reader, snapshot)) => {
                        followed.context = Some(reader);
                        snapshot
                    }
                    // A fleet that discovers follows publishers only.
                    None if self.scout.is_some() => {
                        let exited = otel_ctx_reader::procfs::start_time(pid).is_none();
                        self.drop_process(pid, exited);
                        return;
                    }
                    None => return,
                }
            }
        };
        followed.published_at = snapshot.monotonic_published_at_ns;
        followed.service = snapshot.context.service_name().map(str::to_owned);
        followed.profiler.set_process_context(Some(&snapshot));
    }

    /// Stops following `pid`; its samples so far go out with the next interval's
    /// profiles.
    fn drop_process(&mut self, pid: u32, exited: bool) {
        let Some(followed) = self.processes.remove(&pid) else {
            return;
        };
        self.sampler.remove_process(pid);
        self.pending.remove(&pid);
        if let Some(scout) = &self.scout {
            scout.set_followed(pid, false);
        }
        if exited {
            self.counts.exited += 1;
        } else {
            self.counts.unpublished += 1;
        }
        let profile = followed.profiler.profile();
        if !profile.entries.is_empty() && self.finished.len() < MAX_FINISHED {
            self.finished.push(profile);
        }
    }

    fn refuse(&mut self, pid: u32, why: String) {
        self.counts.refused += 1;
        self.counts.last_refusal = Some(format!("process {pid}: {why}"));
    }

    /// Takes the discovery thread's reports: new publishers are followed; followed ones
    /// a scan no longer found are read again (and dropped if they stopped publishing).
    fn take_reports(&mut self) {
        let Some(scout) = &self.scout else { return };
        let mut reports = Vec::new();
        while let Some(report) = scout.report() {
            reports.push(report);
        }
        for report in reports {
            match report {
                Report::Found(found) => {
                    let Found {
                        prepared,
                        context,
                        snapshot,
                    } = *found;
                    let pid = prepared.pid;
                    if pid == self.own_pid || self.processes.contains_key(&pid) {
                        continue;
                    }
                    if let Err(e) = self.adopt(prepared, Some((context, snapshot))) {
                        self.refuse(pid, e.to_string());
                    }
                }
                Report::Refused(pid, why) => self.refuse(pid, why),
                Report::Scanned(publishers) => {
                    let missing: Vec<u32> = self
                        .processes
                        .keys()
                        .copied()
                        .filter(|pid| !publishers.contains(pid))
                        .collect();
                    for pid in missing {
                        self.refresh(pid);
                    }
                }
            }
        }
    }

    /// Takes the publication events: each process is read once they stop coming for
    /// [`EVENT_DELAY`].
    fn take_events(&mut self) {
        #[cfg(feature = "ebpf")]
        if let Some(hook) = &mut self.hook {
            while let Some(pid) = hook.next_pid() {
                self.counts.events += 1;
                self.pending.insert(pid, Instant::now() + EVENT_DELAY);
            }
        }
        let now = Instant::now();
        let due: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in due {
            self.pending.remove(&pid);
            self.refresh(pid);
        }
    }

    /// The profiles of the interval that ends now (the processes gone since included),
    /// each process's aggregate started again.
    pub fn take_profiles(&mut self) -> Vec<Profile> {
        self.fetch_debug_files();
        let mut profiles = std::mem::take(&mut self.finished);
        for followed in self.processes.values_mut() {
            let profile = followed.profiler.profile();
            followed.profiler.reset();
            if !profile.entries.is_empty() {
                profiles.push(profile);
            }
        }
        profiles
    }

    /// Every process's whole profile since the start (or the last
    /// [`take_profiles`](Self::take_profiles)), the processes gone since included, with
    /// those that have no samples.
    pub fn profiles(&mut self) -> Vec<Profile> {
        self.fetch_debug_files();
        let mut profiles = std::mem::take(&mut self.finished);
        profiles.extend(self.processes.values().map(|f| f.profiler.profile()));
        profiles
    }

    /// Ends the sampling: the eBPF program is detached, so that making the last profiles
    /// (and waiting for debuginfod) costs the targets nothing and loses no sample.
    pub fn finish(&mut self) {
        self.sampler.stop();
    }

    /// With the feature `debuginfod` and `DEBUGINFOD_URLS` set, before profiles are made:
    /// asks its servers for the debug files of the stripped modules that have frames in
    /// the profiles, for at most [`SessionOptions::debuginfod_time`] in all (within the
    /// ring's seconds, so a sampler still running loses nothing meanwhile); a module
    /// asked once is not asked again.
    fn fetch_debug_files(&mut self) {
        #[cfg(feature = "debuginfod")]
        if let Some((client, time)) = &self.debuginfod {
            let until = Instant::now() + *time;
            self.fetches.clear();
            for followed in self.processes.values() {
                let fetched = followed.profiler.fetch_debug_files(client, until);
                self.fetches.extend(fetched);
            }
        }
    }

    /// What the last profiles' fetch asked debuginfod for, module by module, and got.
    #[cfg(feature = "debuginfod")]
    pub fn debuginfod(&self) -> &[crate::DebuginfodFetch] {
        &self.fetches
    }

    /// Whether it follows no process (a fleet given its processes ends when they have
    /// all exited).
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }
}
