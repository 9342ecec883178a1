//! `otel-ctx`: find and read OpenTelemetry process and thread contexts.
//!
//! Exit status, the same for every command: 0 when it did its job; 1 when the process
//! has no valid context or a rule fails; 2 on bad usage, an output that cannot be
//! written, or when the process could not be read (no such process, permission denied);
//! 3 when `profile --otlp` delivered none of its profiles, 4 part of them. A closed output pipe ends it quietly
//! (`SIGPIPE`), as it ends other Unix tools.

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};

mod commands;

/// Find and read the OpenTelemetry process contexts (OTEP 4719) and thread contexts
/// (OTEP 4947) that processes on this host publish.
#[derive(Debug, Parser)]
#[command(
    name = "otel-ctx",
    version,
    after_help = "Exit status: 0 done; 1 the process has no valid context, or a rule fails; \
                  2 bad usage, an output that cannot be written, or the process could not \
                  be read (no such process, permission denied); 3 profile --otlp delivered \
                  nothing; 4 it delivered part."
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every process that publishes a process context.
    Ps {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// List each process the kernel would not show (pid 1 under a security module,
        /// other users' processes without root), with what refused it; without it, a line
        /// on stderr counts them.
        #[arg(short, long)]
        verbose: bool,
    },
    /// Show the whole process context of one process.
    Show {
        /// The process id.
        pid: u32,
        /// Print JSON (format in JSON.md).
        #[arg(long)]
        json: bool,
        /// Read the thread slot even when the process context announces no known
        /// thread-context schema, and name every attribute by its key index (`#0`)
        /// instead of through the key map. For debugging writers; readers that follow
        /// OTEP 4947 do neither.
        #[arg(long)]
        raw_keys: bool,
        // With `--sampler ebpf`, the threads that ran during a 300 ms window are listed,
        // each as last sampled.
        #[command(flatten)]
        sampler: commands::SamplerFlag,
    },
    /// Sample every thread's context and count samples per attribute value.
    Watch(commands::watch::Request),
    /// Profile a process's CPU by trace and route: stacks unwound and symbolized, each
    /// sample labeled with its thread context; written as pprof (`.pb.gz`), folded text
    /// (`.folded`) or an SVG flame graph (`.svg`).
    Profile(Box<commands::profile_request::Request>),
    /// Start a demo service that publishes contexts, and watch what a reader sees (a build
    /// with the `demo` feature: `cargo install --locked --path cli --features demo`).
    Demo {
        /// How long to run, such as `10s`, `500ms` or `2m`; Ctrl-C stops earlier.
        #[arg(long, default_value = "10s", value_parser = commands::parse_duration, allow_negative_numbers = true)]
        duration: Duration,
        #[command(flatten)]
        sampler: commands::SamplerFlag,
        /// Also profile the service over the demo's run (as `otel-ctx profile` does) and
        /// write the profile here (`.pb.gz`, `.folded` or `.svg`).
        #[arg(long)]
        profile: Option<std::path::PathBuf>,
    },
    /// Check that a process publishes its contexts as the specifications require (rules
    /// and their references in CHECK.md). Exit status 0 when no rule fails, 1 when a
    /// rule fails, 2 when the check could not be made.
    Check {
        /// The process id; or give a command after `--` to start, check and stop.
        #[arg(required_unless_present = "command", conflicts_with = "command")]
        pid: Option<u32>,
        /// With a command: how long to wait for its process context to appear.
        #[arg(long, default_value = "10s", value_parser = commands::parse_duration, allow_negative_numbers = true)]
        wait: Duration,
        /// How long to watch updates and sample threads; 0 reads once.
        #[arg(long, default_value = "1s", value_parser = commands::parse_duration, allow_negative_numbers = true)]
        observe: Duration,
        /// Print JSON (format in JSON.md).
        #[arg(long)]
        json: bool,
        /// The program to start and check, with its arguments (after `--`).
        #[arg(last = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Print a shell's completion script, generated from this command line (the README's
    /// "Install" says where each shell looks for it).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or with --dir write one page per command there
    /// (`otel-ctx.1`, `otel-ctx-profile.1`, ...): `man otel-ctx`.
    Man {
        /// The directory to write every page into (such as `~/.cargo/share/man/man1`,
        /// which `man` searches when `~/.cargo/bin` is on the PATH); created if missing.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
    /// The demo service itself (started by `demo`).
    #[cfg(feature = "demo")]
    #[command(hide = true)]
    DemoService,
}

fn main() -> ExitCode {
    commands::default_sigpipe();
    let args = Args::parse();
    let result = match args.command {
        Command::Ps { json, verbose } => commands::ps::run(json, verbose),
        Command::Show {
            pid,
            json,
            raw_keys,
            sampler,
        } => commands::show::run(pid, json, raw_keys, sampler.method()),
        Command::Watch(request) => commands::watch::run(&request),
        Command::Profile(request) => commands::profile::run(&request),
        #[cfg(feature = "demo")]
        Command::Demo {
            duration,
            sampler,
            profile,
        } => commands::demo::run(duration, sampler.method(), profile.as_deref()),
        #[cfg(not(feature = "demo"))]
        Command::Demo { .. } => Err(commands::Failure::usage(
            "this otel-ctx was built without the demo service, which links a writer and the \
             OpenTelemetry SDK: build it with `--features demo` (cargo install --locked --path cli \
             --features demo)",
        )),
        #[cfg(feature = "demo")]
        Command::DemoService => commands::demo::service().map_err(commands::Failure::Unusable),
        Command::Check {
            pid,
            wait,
            observe,
            json,
            command,
        } => commands::check::run(pid, &command, wait, observe, json),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man(dir.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("otel-ctx: {failure}");
            ExitCode::from(failure.exit_code())
        }
    }
}

/// `otel-ctx completions <shell>`: the script clap_complete generates from [`Args`].
fn completions(shell: clap_complete::Shell) -> Result<(), commands::Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "otel-ctx", &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    if shell == clap_complete::Shell::Bash {
        // clap_complete 4.6 names the states of a hyphenated command two ways in its bash
        // script, `otel__ctx__subcmd__profile` where it reads the words and
        // `otel__subcmd__ctx__subcmd__profile` where it offers their options, so that no
        // command's options would ever complete (clap-rs/clap#6421): the one name.
        script = script.replace("otel__subcmd__ctx", "otel__ctx");
    }
    commands::out(&script)
}

/// `otel-ctx man`: the manual page clap_mangen generates from [`Args`], on stdout; with a
/// directory, a page per command written there.
fn man(dir: Option<&std::path::Path>) -> Result<(), commands::Failure> {
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(Args::command())
            .render(&mut page)
            .map_err(|e| commands::Failure::Unusable(format!("cannot render the page: {e}")))?;
        return commands::out(&String::from_utf8_lossy(&page));
    };
    let cannot = |e: std::io::Error| {
        commands::Failure::Unusable(format!("cannot write the pages in {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(cannot)?;
    clap_mangen::generate_to(Args::command(), dir).map_err(cannot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use otel_ctx_sampler::Method;

    fn profile(args: &[&str]) -> Result<commands::profile_request::Request, clap::Error> {
        let argv = ["otel-ctx", "profile"].iter().chain(args);
        match Args::try_parse_from(argv)?.command {
            Command::Profile(request) => Ok(*request),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn profile_takes_a_pid_or_all() {
        let one = profile(&["42"]).expect("a pid");
        assert_eq!(
            (one.pid, one.all, one.otlp.clone()),
            (Some(42), false, None)
        );
        let all = profile(&["--all", "--otlp", "--duration", "0"]).expect("--all");
        assert_eq!((all.pid, all.all), (None, true));
        assert_eq!(all.otlp, Some(None), "--otlp without a URL");
        assert!(all.duration.is_zero());
        let url = profile(&["--all", "--otlp=http://c:4318"]).expect("a URL");
        assert_eq!(url.otlp, Some(Some("http://c:4318".to_owned())));
        assert_eq!(url.otlp_queue, 64 << 20);
        assert!(profile(&[]).is_err(), "neither a pid nor --all");
        assert!(profile(&["42", "--all"]).is_err(), "both");
        assert!(profile(&["--all", "--otlp=x", "--otlp-file", "f"]).is_err());
        assert!(profile(&["--all", "--otlp-queue", "lots"]).is_err());
    }

    /// Every command that samples shows one sampler flag, the same in each `--help`,
    /// and takes its older spellings, hidden.
    #[test]
    fn one_sampler_flag_on_every_command_that_samples() {
        let mut cli = Args::command();
        let help = |name: &str, cli: &mut clap::Command| {
            let sub = cli.find_subcommand_mut(name).expect(name);
            let text = sub.render_long_help().to_string();
            let at = text
                .find("--sampler <SAMPLER>")
                .expect("--sampler in the help");
            // The flag's own text, up to the next option.
            let mut lines = text[at..].lines();
            let first = lines.next().unwrap_or_default();
            let block: Vec<&str> = std::iter::once(first)
                .chain(lines.take_while(|l| {
                    let t = l.trim_start();
                    !t.starts_with("--") && !t.starts_with("-h, ")
                }))
                .collect();
            assert!(
                !text.contains("--ebpf") && !text.contains("--ptrace"),
                "{text}"
            );
            block.join("\n")
        };
        let show = help("show", &mut cli);
        assert!(show.contains("ebpf") && show.contains("ptrace"), "{show}");
        for name in ["watch", "profile", "demo"] {
            assert_eq!(help(name, &mut cli), show, "{name}");
        }
        for (args, method) in [
            (&["--sampler", "ptrace"][..], Some(Method::Ptrace)),
            (&["--sampler", "ebpf"], Some(Method::Ebpf)),
            (&["--ptrace"], Some(Method::Ptrace)),
            (&["--ebpf"], Some(Method::Ebpf)),
            (&[], None),
        ] {
            let request = profile(&[&["42"][..], args].concat()).expect("parses");
            assert_eq!(request.sampler.method(), method, "{args:?}");
        }
        assert!(profile(&["42", "--ebpf", "--sampler", "ptrace"]).is_err());
    }

    /// The DaemonSet example's arguments are the tool's.
    #[test]
    fn the_daemonset_runs_a_command_the_tool_takes() {
        let yaml = include_str!("../deploy/daemonset.yaml");
        let line = yaml
            .lines()
            .find_map(|l| l.trim().strip_prefix("args: ["))
            .expect("an args line");
        let args: Vec<&str> = line
            .trim_end_matches(']')
            .split(',')
            .map(|a| a.trim().trim_matches('"'))
            .collect();
        assert_eq!(args[0], "profile");
        let request = profile(&args[1..]).expect("the DaemonSet's arguments");
        assert!(request.all && request.otlp == Some(None) && request.duration.is_zero());
    }
}
