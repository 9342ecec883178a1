//! A fleet whose profiles go to an OTLP exporter every interval: the loop under
//! `otel-ctx profile --all --otlp`, for any tool that sends a fleet's profiles.

use std::time::{Duration, Instant};

use otel_ctx_sampler::SamplerError;

use super::fleet::FleetProfiler;
use crate::export::{Exporter, Stats};

/// How often [`ExportingFleet::finish`] looks at the exporter while it finishes.
const FINISH_TICK: Duration = Duration::from_millis(100);

/// A [`FleetProfiler`] and the [`Exporter`] its profiles go to, every `interval`.
///
/// ```no_run
/// use std::time::{Duration, Instant};
/// use otel_ctx_profile::export::{Destination, Exporter, Options};
/// use otel_ctx_profile::otlp::OtlpScope;
/// use otel_ctx_profile::{ExportingFleet, FleetOptions, FleetProfiler};
///
/// let fleet = FleetProfiler::start(FleetOptions::default())?;
/// let scope = OtlpScope { name: "my-profiler".into(), version: "1.0".into() };
/// let to = Destination::File("profiles.otlp".into());
/// let exporter = Exporter::start(Options::new(to, scope))?;
/// let mut run = ExportingFleet::new(fleet, exporter, Duration::from_secs(10));
/// let end = Instant::now() + Duration::from_secs(60);
/// while Instant::now() < end {
///     run.step(Duration::from_millis(100))?;
/// }
/// let (_fleet, stats) = run.finish(|_| {})?;
/// println!("{stats}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ExportingFleet {
    fleet: FleetProfiler,
    exporter: Exporter,
    interval: Duration,
    exported: Instant,
}

impl ExportingFleet {
    /// `fleet`'s profiles handed to `exporter` every `interval` (at least one step).
    pub fn new(fleet: FleetProfiler, exporter: Exporter, interval: Duration) -> Self {
        Self {
            fleet,
            exporter,
            interval,
            exported: Instant::now(),
        }
    }

    /// The fleet: its processes, counts and summary.
    pub const fn fleet(&self) -> &FleetProfiler {
        &self.fleet
    }

    /// The exporter: its destination and counts.
    pub const fn exporter(&self) -> &Exporter {
        &self.exporter
    }

    /// One step of the fleet, at most `wait` long; once `interval` has passed since the
    /// last export, every process's profile is taken and handed to the exporter, which
    /// sends it on its own thread (the step does not wait for the network).
    pub fn step(&mut self, wait: Duration) -> Result<(), SamplerError> {
        self.fleet.step(wait)?;
        if self.exported.elapsed() >= self.interval {
            self.exported = Instant::now();
            self.exporter.submit(self.fleet.take_profiles());
        }
        Ok(())
    }

    /// Ends the run: the samples taken since the last step, sampling stopped, the last
    /// profiles handed over, then the exporter closed and waited for (within its
    /// timeout), `tick` called every tenth of a second meanwhile (progress, failures).
    /// The fleet, and what the exporter delivered and dropped.
    pub fn finish(
        mut self,
        mut tick: impl FnMut(&Exporter),
    ) -> Result<(FleetProfiler, Stats), SamplerError> {
        self.fleet.step(Duration::ZERO)?;
        self.fleet.finish();
        self.exporter.submit(self.fleet.take_profiles());
        self.exporter.close();
        while !self.exporter.is_done() {
            tick(&self.exporter);
            std::thread::sleep(FINISH_TICK);
        }
        tick(&self.exporter);
        Ok((self.fleet, self.exporter.finish()))
    }
}
