//! The loom runs: a scenario's steps on the model writer, a reader that stops it at every
//! interrupt point and checks every image it may see, the scenarios of this crate's own
//! steps, and the deliberately broken writers loom must catch.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
// The crate is `no_std`: the model, a test, uses std.
use std::boxed::Box;
use std::string::{String, ToString};
use std::sync::Mutex;
use std::vec::Vec;
use std::{format, println, vec};

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

use super::memory::Shared;
use super::reader::{read_view, Found};
use super::writer::{run, Intent, Step};
use super::{address, Logical, CAPACITY, FOREIGN};

/// A scenario: steps run before the reader exists, then the writer's steps.
struct Scenario {
    name: &'static str,
    setup: &'static [Step],
    steps: &'static [Step],
}

/// What the reader found, summed over every execution of one scenario.
#[derive(Default)]
struct Seen {
    executions: usize,
    null: usize,
    invalid: usize,
    /// Accepted records: the state the interrupted step produces (`after`), the one
    /// before it (`before`), or an earlier one whose newer stores the compiler had not
    /// emitted yet (`older`).
    before: usize,
    after: usize,
    older: usize,
    /// Where the reader stopped the writer: before interrupt point `n` (counted from 1
    /// in the first step), or after the last one (`total_points + 1`).
    points: BTreeSet<usize>,
    /// Interrupt points the writer passes in one execution.
    total_points: usize,
}

impl Seen {
    fn summary(&self) -> String {
        format!(
            "{} executions; stopped at {} of {} points; {} views: NULL {}, invalid {}, \
             accepted {} (the state after the interrupted step {}, before it {}, older {})",
            self.executions,
            self.points.len(),
            self.total_points + 1,
            self.null + self.invalid + self.before + self.after + self.older,
            self.null,
            self.invalid,
            self.before + self.after + self.older,
            self.after,
            self.before,
            self.older
        )
    }
}

/// Runs `scenario` under loom, checking every view of every stop.
fn check(scenario: &'static Scenario, seen: &'static Mutex<Seen>) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(3));
    builder.check(move || {
        seen.lock().unwrap_or_else(|e| e.into_inner()).executions += 1;
        let shared = Arc::new(Shared::new());
        // The setup and the states the writer's steps go through.
        let mut intent = Intent::new();
        for &step in scenario.setup {
            run(&shared, &intent, step);
            intent.apply(step);
        }
        shared.write(|m| {
            m.fence();
            m.points = 0;
        });
        let mut states = vec![intent.visible()];
        let mut intents = vec![intent.clone()];
        for &step in scenario.steps {
            intent.apply(step);
            states.push(intent.visible());
            intents.push(intent.clone());
        }

        let writer = {
            let shared = shared.clone();
            let intents = intents.clone();
            thread::spawn(move || {
                for (index, &step) in scenario.steps.iter().enumerate() {
                    shared.write(|m| m.step = index);
                    run(&shared, &intents[index], step);
                }
                shared.write(|m| m.step = scenario.steps.len());
                // Release: the reader that sees `done` sees every store.
                shared.done.store(true, Ordering::Release);
            })
        };

        // The reader: stop the writer, read, let it go.
        shared.stop.store(true, Ordering::SeqCst);
        while !(shared.parked.load(Ordering::Acquire) || shared.done.load(Ordering::Acquire)) {
            thread::yield_now();
        }
        // Parked at interrupt point `points` (counted from 1), or after the last one.
        let parked = shared.parked.load(Ordering::Acquire);
        let (step, point, results) = shared.read(|m| {
            let results: Vec<_> = m.views().iter().map(read_view).collect();
            (m.step, m.points + usize::from(!parked), results)
        });
        shared.resume.store(true, Ordering::Release);

        // The states the attached record has had so far: the one the interrupted step
        // produces is the last.
        let had = &states[..states.len().min(step + 2)];
        let mut stats = seen.lock().unwrap_or_else(|e| e.into_inner());
        stats.points.insert(point);
        for result in results {
            match result {
                Err(problem) => panic!(
                    "{}: stopped in step {step} ({:?}): {problem}",
                    scenario.name,
                    scenario.steps.get(step)
                ),
                Ok(Found::Null) => stats.null += 1,
                Ok(Found::Invalid) => stats.invalid += 1,
                Ok(Found::Record(record)) => {
                    // The newest state first: states may repeat.
                    match had.iter().rposition(|s| s.as_ref() == Some(&record)) {
                        Some(i) if i == step + 1 => stats.after += 1,
                        Some(i) if i == step => stats.before += 1,
                        Some(_) => stats.older += 1,
                        None => panic!(
                            "{}: stopped in step {step} ({:?}), accepted {record:?}, a record \
                             the writer never wrote; it wrote {had:?}",
                            scenario.name,
                            scenario.steps.get(step)
                        ),
                    }
                }
            }
        }
        drop(stats);
        writer.join().expect("the writer thread");
        // After the last step: the slot holds what the steps say, and the other library's
        // record is as it wrote it.
        let last = intents.last().expect("the state after the last step");
        let mut foreign = [0u8; CAPACITY];
        Logical::foreign().write_to(&mut foreign);
        shared.read(|m| {
            assert_eq!(
                m.latest.slot,
                last.attached.map_or(0, address),
                "{}: the slot after the last step",
                scenario.name
            );
            assert!(
                m.latest.bytes[FOREIGN] == foreign && !m.latest.unknown[FOREIGN].contains(&true),
                "{}: the foreign record changed",
                scenario.name
            );
        });
        let total = shared.read(|m| m.points);
        seen.lock().unwrap_or_else(|e| e.into_inner()).total_points = total;
    });
}

const ATTACH_AND_UPDATE: Scenario = Scenario {
    name: "attach, update in place",
    setup: &[],
    steps: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "one")],
        },
        Step::Attach { record: Some(0) },
        Step::Update {
            record: 0,
            version: 2,
            attrs: &[(0, "two"), (1, "2")],
        },
    ],
};

const GROW_AND_SHRINK: Scenario = Scenario {
    name: "append, truncate, append into the released bytes, truncate",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::Attach { record: Some(0) },
    ],
    steps: &[
        Step::Append {
            record: 0,
            key: 1,
            value: "bb",
        },
        Step::Truncate { record: 0, keep: 1 },
        Step::Append {
            record: 0,
            key: 2,
            value: "ccc",
        },
        Step::Truncate { record: 0, keep: 0 },
    ],
};

const SWAP_AND_DETACH: Scenario = Scenario {
    name: "build another record, swap it in, free the old one, detach, free",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::Attach { record: Some(0) },
    ],
    steps: &[
        Step::Update {
            record: 1,
            version: 2,
            attrs: &[(0, "b")],
        },
        Step::Attach { record: Some(1) },
        Step::Attach { record: None },
    ],
};

const FOREIGN_IN_THE_SLOT: Scenario = Scenario {
    name: "another library's record in the slot: refused, left alone, swapped out, put back",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::ForeignAttach,
    ],
    steps: &[
        Step::UpdateAttached {
            version: 2,
            attrs: &[(0, "b")],
        },
        Step::Detach,
        Step::Attach { record: Some(0) },
        Step::UpdateAttached {
            version: 3,
            attrs: &[(0, "c")],
        },
        Step::PutBack,
    ],
};

const OURS_UNDER_FOREIGN: Scenario = Scenario {
    name: "a record of this crate under another library's is recognised when it comes back",
    setup: &[
        Step::Update {
            record: 0,
            version: 1,
            attrs: &[(0, "a")],
        },
        Step::Attach { record: Some(0) },
        Step::ForeignAttach,
    ],
    steps: &[
        Step::Update {
            record: 1,
            version: 2,
            attrs: &[(0, "b")],
        },
        Step::Attach { record: Some(1) },
        Step::PutBack,
        Step::ForeignDetach,
        Step::UpdateAttached {
            version: 3,
            attrs: &[(0, "c")],
        },
    ],
};

/// Checks a scenario of the crate's own steps and that the reader saw each kind of
/// state.
fn check_protocol(scenario: &'static Scenario) -> &'static Mutex<Seen> {
    let seen: &'static Mutex<Seen> = Box::leak(Box::new(Mutex::new(Seen::default())));
    check(scenario, seen);
    let seen_now = seen.lock().unwrap_or_else(|e| e.into_inner());
    println!("{}: {}", scenario.name, seen_now.summary());
    let every_point: BTreeSet<usize> = (1..=seen_now.total_points + 1).collect();
    assert_eq!(
        seen_now.points,
        every_point,
        "the reader did not stop the writer at every point: {}",
        seen_now.summary()
    );
    assert!(
        seen_now.before > 0 && seen_now.after > 0,
        "{}",
        seen_now.summary()
    );
    drop(seen_now);
    seen
}

#[test]
fn loom_attach_and_update_in_place() {
    let seen = check_protocol(&ATTACH_AND_UPDATE);
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    assert!(seen.null > 0 && seen.invalid > 0, "{}", seen.summary());
}

#[test]
fn loom_grow_and_shrink_in_place() {
    check_protocol(&GROW_AND_SHRINK);
}

#[test]
fn loom_swap_free_and_detach() {
    let seen = check_protocol(&SWAP_AND_DETACH);
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    assert!(seen.null > 0, "{}", seen.summary());
}

#[test]
fn loom_foreign_record_in_the_slot() {
    check_protocol(&FOREIGN_IN_THE_SLOT);
}

#[test]
fn loom_record_under_a_foreign_one() {
    check_protocol(&OURS_UNDER_FOREIGN);
}

/// Runs a scenario with a broken step; returns loom's failure message.
fn failure_with(scenario: &'static Scenario) -> String {
    let seen: &'static Mutex<Seen> = Box::leak(Box::new(Mutex::new(Seen::default())));
    let result = catch_unwind(AssertUnwindSafe(|| check(scenario, seen)));
    let executions = seen.lock().unwrap_or_else(|e| e.into_inner()).executions;
    let payload = match result {
        Ok(()) => panic!(
            "loom found nothing wrong with {} after {executions} executions",
            scenario.name
        ),
        Err(payload) => payload,
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    println!(
        "{}: loom failed after {executions} executions: {message}",
        scenario.name
    );
    message
}

#[test]
fn loom_catches_an_update_without_its_first_fence() {
    const BROKEN: Scenario = Scenario {
        name: "broken: update in place without the fence after valid = 0",
        setup: &[
            Step::Update {
                record: 0,
                version: 1,
                attrs: &[(0, "one")],
            },
            Step::Attach { record: Some(0) },
        ],
        steps: &[Step::UpdateWithoutFirstFence {
            record: 0,
            version: 2,
            attrs: &[(0, "two")],
        }],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("possibly unwritten or torn"), "{message}");
}

#[test]
fn loom_catches_an_append_without_its_fence() {
    const BROKEN: Scenario = Scenario {
        name: "broken: append without the fence before the new size",
        setup: GROW_AND_SHRINK.setup,
        steps: &[Step::AppendWithoutFence {
            record: 0,
            key: 1,
            value: "bb",
        }],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("possibly unwritten or torn"), "{message}");
}

#[test]
fn loom_catches_a_free_before_the_slot_store_is_emitted() {
    const BROKEN: Scenario = Scenario {
        name: "broken: swap without the fence after the slot store, then free",
        setup: SWAP_AND_DETACH.setup,
        steps: &[
            Step::Update {
                record: 1,
                version: 2,
                attrs: &[(0, "b")],
            },
            Step::AttachWithoutTrailingFence { record: Some(1) },
        ],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("may be anything"), "{message}");
}

#[test]
fn loom_catches_a_swap_that_frees_a_foreign_record() {
    const BROKEN: Scenario = Scenario {
        name: "broken: swap that frees whatever the slot held",
        setup: FOREIGN_IN_THE_SLOT.setup,
        steps: &[Step::AttachFreeingAnything { record: Some(0) }],
    };
    let message = failure_with(&BROKEN);
    assert!(message.contains("freed the foreign record"), "{message}");
}
