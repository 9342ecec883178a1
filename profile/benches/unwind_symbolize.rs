//! The user-space cost of a sample with warm caches: unwinding its stack copy,
//! symbolizing its frames, and counting it, on samples captured from the routes fixture
//! (`-O2 -fomit-frame-pointer`: every frame of its code is unwound by CFI).
//!
//! Needs root (or CAP_SYS_PTRACE) and gcc, as the tests do.

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use otel_ctx_profile::{ProfileOptions, Profiler};
use otel_ctx_sampler::Sample;

fn benches(c: &mut Criterion) {
    let program = support::build_routes("routes-bench", &["-fomit-frame-pointer"]);
    let fixture = support::Fixture::start(&program, &[]);
    let captured = support::capture(fixture.pid, 100);
    let mut profiler = Profiler::new(fixture.pid, ProfileOptions::default());
    profiler.update_maps(&captured.maps);
    // The modules are read; the fixture's spinning threads would only take the cores.
    fixture.finish();
    let samples = &captured.samples;
    // Warm every cache: framehop's rules, each module's symbolized addresses.
    support::replay(&mut profiler, samples);
    let mut frames = Vec::new();
    for s in samples {
        profiler.unwind(&s.registers, &s.stack, &mut frames);
        for &frame in &frames {
            profiler.symbolize(frame);
        }
    }
    let depth = samples
        .iter()
        .map(|s| {
            profiler.unwind(&s.registers, &s.stack, &mut frames);
            frames.len()
        })
        .sum::<usize>() as f64
        / samples.len() as f64;
    eprintln!(
        "{} samples, {depth:.1} frames each on average",
        samples.len()
    );

    let mut group = c.benchmark_group("per_sample");
    group.throughput(Throughput::Elements(samples.len() as u64));
    group.bench_function("unwind", |b| {
        b.iter(|| {
            for s in samples {
                profiler.unwind(&s.registers, &s.stack, &mut frames);
            }
        })
    });
    group.bench_function("unwind_and_symbolize", |b| {
        b.iter(|| {
            for s in samples {
                profiler.unwind(&s.registers, &s.stack, &mut frames);
                for &frame in &frames {
                    std::hint::black_box(profiler.symbolize(frame));
                }
            }
        })
    });
    // The samples as the sampler hands them over, made once.
    let sampled: Vec<Sample<'_>> = samples
        .iter()
        .map(|s| {
            Sample::new(0, s.tid, &s.thread_name, Some(s.registers), &s.stack)
                .with_context(s.context.as_ref().map(support::OwnedContext::as_ref))
        })
        .collect();
    group.bench_function("add", |b| {
        b.iter(|| {
            for sample in &sampled {
                std::hint::black_box(profiler.add(sample));
            }
        })
    });
    group.finish();
}

criterion_group!(unwind_symbolize, benches);
criterion_main!(unwind_symbolize);
