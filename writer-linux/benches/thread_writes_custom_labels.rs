//! `custom-labels` 0.4.6: `with_labels` of 2 labels around a closure that does nothing.
//! `thread_writes.rs`'s `with_labels_2` rows measure this crate's closest operation, a
//! 2-attribute context attached for the duration of a closure. Its own binary: custom-labels
//! defines its own TLS symbols and links a C++ library.
//!
//! custom-labels builds only where its C++ core and bindgen (libclang) can run: x86_64
//! glibc here. Elsewhere this binary only says so.

#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[path = "criterion_config.rs"]
mod criterion_config;
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[path = "thread_inputs.rs"]
mod inputs;

#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
mod bench {
    use std::hint::black_box;

    use criterion::{criterion_group, Criterion};

    use super::inputs;

    fn with_labels(c: &mut Criterion) {
        let labels = [
            (inputs::LABEL_KEYS[0], inputs::VALUES[0]),
            (inputs::LABEL_KEYS[1], inputs::VALUES[1]),
        ];
        c.benchmark_group("with_labels_2")
            .bench_function("custom-labels", |b| {
                b.iter(|| custom_labels::with_labels(black_box(labels), || black_box(0u8)))
            });
    }

    criterion_group! {
        name = benches;
        config = super::criterion_config::config();
        targets = with_labels
    }

    /// Runs the group and prints criterion's summary, as `criterion_main!` does.
    pub fn main() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}

fn main() {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    bench::main();
    #[cfg(not(all(target_arch = "x86_64", target_env = "gnu")))]
    eprintln!("thread_writes_custom_labels: custom-labels is only measured on x86_64 glibc");
}
