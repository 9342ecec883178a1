//! The criterion set-up every bench of the workspace shares: the writer's here, and the
//! integrations' and the C ABI's, which include this file with `#[path]`. Short windows,
//! so that `scripts/bench.sh` can pair many runs (it shortens them further from the
//! command line, which criterion applies over this).

use std::time::Duration;

use criterion::Criterion;

/// The benches' `Criterion`: 0.5 s of warm-up, then 2 s of measurement in 50 samples per
/// row.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}
