//! What the tests share: the C fixture built against the workspace's C ABI, a running
//! copy of it, samples taken from it with the reader, and replaying them into a
//! profiler.
#![allow(dead_code)]

use std::time::Duration;

#[path = "fixture.rs"]
mod fixture;
pub use fixture::*;

use otel_ctx_codec::attrs::AttrsWriter;
use otel_ctx_codec::record::RecordHeader;
use otel_ctx_profile::{Profile, ProfileOptions, Profiler};
use otel_ctx_reader::{
    ProcessContextReader, ProcessMaps, RecordBuffer, Snapshot, ThreadContextRef, ThreadReader,
    UserRegisters,
};
use otel_ctx_sampler::stack::StackReader;
use otel_ctx_sampler::{Sample, StackBuffer};

/// A thread context as sampled, owned: its record and the key map that names it.
#[derive(Clone, Debug)]
pub struct OwnedContext {
    pub header: RecordHeader,
    pub attrs_data: Vec<u8>,
    pub key_map: Vec<String>,
}

impl OwnedContext {
    /// A record with these ids and attributes (each name a key of the key map).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], attributes: &[(&str, &[u8])]) -> Self {
        let mut buf = vec![0; 4096];
        let mut writer = AttrsWriter::new(&mut buf);
        for (key, (_, value)) in attributes.iter().enumerate() {
            writer.push(key as u8, value).expect("attributes fit");
        }
        let attrs_data = writer.as_bytes().to_vec();
        Self {
            header: RecordHeader {
                trace_id,
                span_id,
                valid: 1,
                trace_flags: 1,
                attrs_data_size: (attrs_data.len() as u16).into(),
            },
            attrs_data,
            key_map: attributes.iter().map(|(k, _)| (*k).to_owned()).collect(),
        }
    }

    /// The context as a sampler hands it over.
    pub fn as_ref(&self) -> ThreadContextRef<'_> {
        ThreadContextRef::new(self.header, 0, &self.attrs_data, &self.key_map)
    }
}

/// One sample, owned, to replay into profilers with different options.
#[derive(Clone, Debug)]
pub struct Captured {
    pub tid: u32,
    pub thread_name: String,
    pub registers: UserRegisters,
    pub stack: Vec<u8>,
    pub context: Option<OwnedContext>,
}

/// What was captured of a fixture: its maps, its process context, its samples.
pub struct Capture {
    pub pid: u32,
    pub maps: ProcessMaps,
    pub snapshot: Option<Snapshot>,
    pub samples: Vec<Captured>,
}

/// Samples every thread of `pid` `rounds` times, a millisecond apart.
pub fn capture(pid: u32, rounds: usize) -> Capture {
    let maps = ProcessMaps::read(pid).expect("read the maps");
    let snapshot = ProcessContextReader::open(pid)
        .and_then(|mut r| r.read())
        .ok();
    let mut reader = ThreadReader::open(pid).expect("open the thread reader");
    let key_map = reader.key_map().map(<[String]>::to_vec).unwrap_or_default();
    let tids = reader.tids().expect("list the threads");
    let names: Vec<String> = tids
        .iter()
        .map(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_owned())
                .unwrap_or_default()
        })
        .collect();
    let mut record = RecordBuffer::new();
    let mut stack = StackBuffer::default();
    let mut samples = Vec::new();
    for _ in 0..rounds {
        for (tid, name) in tids.iter().zip(&names) {
            let Ok((held, context)) = otel_ctx_sampler::stack::sample_with_stack_into(
                &mut reader,
                *tid,
                &mut record,
                &mut stack,
            ) else {
                continue;
            };
            let context = context.map(|c| OwnedContext {
                header: c.header,
                attrs_data: c.attrs_data.to_vec(),
                key_map: key_map.clone(),
            });
            samples.push(Captured {
                tid: *tid,
                thread_name: name.clone(),
                registers: held.registers,
                stack: stack.bytes().to_vec(),
                context,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Capture {
        pid,
        maps,
        snapshot,
        samples,
    }
}

/// Samples every thread of `pid`, a process that publishes no thread contexts, `rounds`
/// times, a millisecond apart: its stacks alone.
pub fn capture_stacks(pid: u32, rounds: usize) -> Capture {
    let maps = ProcessMaps::read(pid).expect("read the maps");
    let reader = StackReader::new(pid);
    let tids = reader.tids().expect("list the threads");
    let names: Vec<String> = tids
        .iter()
        .map(|tid| otel_ctx_reader::procfs::comm(*tid).unwrap_or_default())
        .collect();
    let mut stack = StackBuffer::default();
    let mut samples = Vec::new();
    for _ in 0..rounds {
        for (tid, name) in tids.iter().zip(&names) {
            let Ok(registers) = reader.sample_stack_into(*tid, &mut stack) else {
                continue;
            };
            samples.push(Captured {
                tid: *tid,
                thread_name: name.clone(),
                registers,
                stack: stack.bytes().to_vec(),
                context: None,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Capture {
        pid,
        maps,
        snapshot: None,
        samples,
    }
}

/// A deterministic generator of garbage (xorshift64): the same garbage every run.
pub fn garbage(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// CPU time this thread has used: unlike wall time, not stretched by other threads
/// that share the cores (the fixtures' spinning ones).
pub fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Adds `captured` to `profiler`; returns the longest (CPU) time one sample took.
pub fn replay(profiler: &mut Profiler, captured: &[Captured]) -> Duration {
    let mut slowest = Duration::ZERO;
    for c in captured {
        let sample = Sample::new(0, c.tid, &c.thread_name, Some(c.registers), &c.stack)
            .with_context(c.context.as_ref().map(OwnedContext::as_ref))
            .with_weight_ns(1_000_000);
        let started = thread_cpu_time();
        profiler.add(&sample);
        slowest = slowest.max(thread_cpu_time() - started);
    }
    slowest
}

/// Samples a running fixture and makes a profile of the samples with each of
/// `options`, while it still runs (its modules are read from the running process).
pub fn profiles(
    fixture: Fixture,
    rounds: usize,
    options: &[ProfileOptions],
) -> (Capture, Vec<Profile>) {
    let captured = capture(fixture.pid, rounds);
    let made = options
        .iter()
        .map(|o| profile_of(&captured, o.clone()).0)
        .collect();
    fixture.finish();
    (captured, made)
}

/// A profile of `capture` made with `options`.
pub fn profile_of(capture: &Capture, options: ProfileOptions) -> (Profile, Duration) {
    let mut profiler = Profiler::new(capture.pid, options);
    profiler.update_maps(&capture.maps);
    profiler.set_process_context(capture.snapshot.as_ref());
    let slowest = replay(&mut profiler, &capture.samples);
    (profiler.profile(), slowest)
}

/// For each route: samples labeled with it, and those whose three innermost locations
/// are in its leaf, middle and top functions.
pub fn route_accuracy(profile: &Profile) -> Vec<(&'static str, u64, u64)> {
    ROUTES
        .iter()
        .map(|&(route, prefix)| {
            let expected = [
                format!("{prefix}_leaf"),
                format!("{prefix}_mid"),
                format!("{prefix}_top"),
            ];
            let mut labeled = 0;
            let mut right = 0;
            for entry in &profile.entries {
                let labels = &profile.label_sets[entry.labels];
                if labels.get("http.route") != Some(route) {
                    continue;
                }
                labeled += entry.samples;
                let Some(stack) = entry.stack.map(|s| &profile.stacks[s]) else {
                    continue;
                };
                let names: Vec<&str> = stack
                    .iter()
                    .take(3)
                    .map(|&at| profile.locations[at].function_name())
                    .collect();
                if names == expected {
                    right += entry.samples;
                }
            }
            (route, labeled, right)
        })
        .collect()
}

/// The folded lines of `profile` grouped by `http.route`, for failure messages.
pub fn folded_text(profile: &Profile) -> String {
    let mut out = Vec::new();
    profile
        .write_folded(&otel_ctx_profile::FoldedOptions::default(), &mut out)
        .expect("write folded");
    let mut text = String::from_utf8(out).expect("UTF-8");
    for m in &profile.mappings {
        text.push_str(&format!(
            "mapping {} symbolized {} debug info {} {}\n",
            m.path,
            m.symbolized,
            m.debug_info,
            m.note.as_deref().unwrap_or("")
        ));
    }
    text
}
