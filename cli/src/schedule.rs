//! When the ptrace sampler takes its next sample: at the asked rate on average, each
//! interval drawn at random between half and one and a half periods.
//!
//! A fixed period aliases with work that repeats at nearly the same period: a thread that
//! alternates two 5 ms requests repeats every 10.05 to 10.11 ms (the requests and their
//! spans), 99 Hz samples every 10.101 ms, so each sample finds the thread a few
//! microseconds further along its cycle than the one before, and a 10 s profile can see
//! one request far more than the other (the README's "When two routes of equal work do
//! not come out even" has the figures). Intervals of that spread move the point a sample
//! falls on by 0.29 periods (their standard deviation) at every sample, so that after
//! about a dozen samples it is spread evenly over any cycle, whatever its length. The eBPF
//! sampler's period is the kernel's CPU clock, fixed, as `perf record -F` has it.

use std::time::{Duration, Instant};

/// The sampling times of one run.
pub struct Schedule {
    next: Instant,
    period: Duration,
    rng: fastrand::Rng,
}

impl Schedule {
    /// A schedule at `hz` samples per second (at least 1), from `start`.
    pub fn new(start: Instant, hz: u32) -> Self {
        Self {
            next: start,
            period: Duration::from_secs(1) / hz.max(1),
            rng: fastrand::Rng::new(),
        }
    }

    /// The interval after a sample: uniform between half and one and a half periods.
    pub fn interval(&mut self) -> Duration {
        self.period / 2 + self.period.mul_f64(self.rng.f64())
    }

    /// Sleeps until the next sample is due. Behind schedule (many threads, a slow
    /// target), it does not try to catch up: the next interval starts now.
    pub fn sleep(&mut self) {
        let interval = self.interval();
        self.next += interval;
        let now = Instant::now();
        if self.next > now {
            std::thread::sleep(self.next - now);
        } else {
            self.next = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_spread_around_the_period() {
        let mut schedule = Schedule::new(Instant::now(), 100);
        let period = Duration::from_millis(10);
        let intervals: Vec<Duration> = (0..10_000).map(|_| schedule.interval()).collect();
        assert!(intervals
            .iter()
            .all(|i| *i >= period / 2 && *i < period * 3 / 2));
        let mean = intervals.iter().sum::<Duration>() / 10_000;
        // The mean of 10,000 uniform draws is within 1% of the period (its standard
        // error is 0.03%).
        assert!(mean.abs_diff(period) < period / 100, "{mean:?}");
        // Spread over the whole range, not a few values.
        let short = intervals.iter().filter(|i| **i < period * 3 / 4).count();
        let long = intervals.iter().filter(|i| **i >= period * 5 / 4).count();
        assert!((2_000..3_000).contains(&short) && (2_000..3_000).contains(&long));
    }

    /// The phase of the samples in a cycle as long as the period spreads evenly: the
    /// samples that fall in the cycle's first half are about half.
    #[test]
    fn no_phase_is_favoured() {
        let mut schedule = Schedule::new(Instant::now(), 99);
        let cycle = schedule.period.as_nanos();
        let mut at = 0u128;
        let mut first_half = 0;
        for _ in 0..1_000 {
            at += schedule.interval().as_nanos();
            if at % cycle < cycle / 2 {
                first_half += 1;
            }
        }
        // A fixed period puts all 1,000 in one half; the binomial's deviation is 16.
        assert!((400..600).contains(&first_half), "{first_half} of 1000");
    }
}
