//! `otel-ctx ps`: every process that publishes a process context.

use std::fmt::Write as _;

use otel_ctx_reader::{boottime_ns, scan, Scan, ScanEntry, Snapshot};

use super::{json, text};

/// The thread-context schema a process announces, if any.
fn schema(s: &Snapshot) -> Option<String> {
    s.threadlocal().ok().and_then(|tl| tl.schema_version)
}

/// Runs `ps`.
pub fn run(as_json: bool) -> Result<(), String> {
    let result = scan().map_err(|e| format!("cannot list /proc: {e}"))?;
    let now = boottime_ns();
    if as_json {
        println!("{}", to_json(&result, now));
    } else {
        print!("{}", to_text(&result, now));
    }
    match result.denied.len() {
        0 => {}
        n => eprintln!(
            "otel-ctx: {n} {} could not be checked (permission denied reading /proc/<pid>/maps); \
             run as root or with CAP_SYS_PTRACE to see {}",
            if n == 1 { "process" } else { "processes" },
            if n == 1 { "it" } else { "them" },
        ),
    }
    Ok(())
}

fn to_text(result: &Scan, now: u64) -> String {
    let dash = || "-".to_owned();
    let mut rows = vec![[
        "PID",
        "COMMAND",
        "SERVICE.NAME",
        "SERVICE.INSTANCE.ID",
        "SERVICE.VERSION",
        "AGE",
        "THREADS",
    ]
    .map(str::to_owned)
    .to_vec()];
    let mut problems = String::new();
    for ScanEntry { pid, comm, context } in &result.entries {
        let row = match context {
            Ok(s) => {
                let ctx = &s.context;
                vec![
                    pid.to_string(),
                    comm.clone(),
                    ctx.service_name().map_or_else(dash, text::shorten),
                    ctx.service_instance_id().map_or_else(dash, text::shorten),
                    ctx.service_version().map_or_else(dash, text::shorten),
                    text::duration(s.age_ns(now)),
                    schema(s).unwrap_or_else(dash),
                ]
            }
            Err(e) => {
                let _ = writeln!(problems, "{pid}: {e}");
                vec![
                    pid.to_string(),
                    comm.clone(),
                    format!("({})", e.kind()),
                    dash(),
                    dash(),
                    dash(),
                    dash(),
                ]
            }
        };
        rows.push(row);
    }
    let mut out = text::table(&rows);
    if result.entries.is_empty() {
        out.push_str("(no process publishes a process context)\n");
    }
    if !problems.is_empty() {
        out.push('\n');
        out.push_str(&problems);
    }
    out
}

fn to_json(result: &Scan, now: u64) -> String {
    let mut out = String::from("{\"processes\": [");
    for (i, ScanEntry { pid, comm, context }) in result.entries.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{{\"pid\": {pid}, \"comm\": ");
        json::string(&mut out, comm);
        match context {
            Ok(s) => {
                let ctx = &s.context;
                out.push_str(", \"service.name\": ");
                json::opt_string(&mut out, ctx.service_name());
                out.push_str(", \"service.instance.id\": ");
                json::opt_string(&mut out, ctx.service_instance_id());
                out.push_str(", \"service.version\": ");
                json::opt_string(&mut out, ctx.service_version());
                let _ = write!(
                    out,
                    ", \"monotonic_published_at_ns\": {}, \"age_ns\": {}, \"threadlocal.schema_version\": ",
                    s.monotonic_published_at_ns,
                    s.age_ns(now)
                );
                json::opt_string(&mut out, schema(s).as_deref());
                out.push_str(", \"error\": null}");
            }
            Err(e) => {
                out.push_str(", \"service.name\": null, \"service.instance.id\": null, \"service.version\": null, \"monotonic_published_at_ns\": null, \"age_ns\": null, \"threadlocal.schema_version\": null, \"error\": {\"kind\": ");
                json::string(&mut out, e.kind());
                out.push_str(", \"message\": ");
                json::string(&mut out, &e.to_string());
                out.push_str("}}");
            }
        }
    }
    out.push_str("], \"denied\": [");
    for (i, pid) in result.denied.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{pid}");
    }
    out.push_str("]}");
    out
}
