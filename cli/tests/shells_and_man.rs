//! What a command-line user expects of `otel-ctx` beside its neighbours: the README's
//! install steps put the completion scripts of bash, zsh and fish, and the manual pages,
//! where each looks for them, and there they complete the tool's commands and options and
//! open with `man`. The steps run as the README gives them (all but `cargo install`, the
//! tool being this build), for a user whose home is a scratch folder. Needs bash-completion,
//! zsh, fish and man-db.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

use support::{bounded, otel_ctx, text};

/// The README's install block: the one that runs `otel-ctx completions bash`.
fn install_steps() -> String {
    let readme = include_str!("../../README.md");
    let block = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .find(|block| block.contains("otel-ctx completions bash"))
        .expect("README.md has an install block with the completions");
    block
        .lines()
        .filter(|line| !line.starts_with("cargo install"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A home with the tool in `~/.cargo/bin`, where `cargo install` puts it, and the
/// README's steps run in it.
fn installed_home() -> PathBuf {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shells-and-man-home");
    let _ = std::fs::remove_dir_all(&home);
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).expect("a home");
    std::os::unix::fs::symlink(otel_ctx(), bin.join("otel-ctx")).expect("link the tool");
    let steps = install_steps();
    let out = in_home(&home, "bash", &["-euo", "pipefail", "-c", &steps]);
    assert!(out.status.success(), "{steps}\n{}", text(&out.stderr));
    home
}

/// Runs `program args` as the user whose home is `home`, with `~/.cargo/bin` first on
/// the PATH.
fn in_home(home: &Path, program: &str, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        home.join(".cargo/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    bounded::output(
        Command::new(program)
            .args(args)
            .env_clear()
            .env("HOME", home)
            .env("PATH", path)
            .env("LANG", "C.UTF-8"),
        bounded::DEADLINE,
    )
    .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

/// Shell lines that print what bash-completion offers for `words` (the last one being
/// completed), with the script its loader finds for `otel-ctx`.
fn bash_completes(words: &[&str]) -> String {
    let words: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    format!(
        "source /usr/share/bash-completion/bash_completion
         if type _comp_load >/dev/null 2>&1; then _comp_load otel-ctx; else __load_completion otel-ctx; fi
         f=$(complete -p otel-ctx | sed -E 's/.* -F ([^ ]+) .*/\\1/')
         COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
         COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}
         \"$f\" otel-ctx \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        words = words.join(" ")
    )
}

fn succeeded(what: &str, out: &Output) -> String {
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn completions_where_each_shell_looks_and_pages_where_man_looks() {
    let home = installed_home();

    // bash: bash-completion loads the script from ~/.local/share on first use.
    for (words, expected) in [
        (&["otel-ctx", "pro"][..], "profile"),
        (&["otel-ctx", "profile", "--al"], "--all"),
        (&["otel-ctx", "ps", "--js"], "--json"),
        (&["otel-ctx", "completions", "zs"], "zsh"),
        (&["otel-ctx", "profile", "--format", "sv"], "svg"),
    ] {
        let said = succeeded(
            "bash",
            &in_home(&home, "bash", &["-c", &bash_completes(words)]),
        );
        assert!(
            said.lines().any(|l| l == expected),
            "bash, {words:?}: {said:?}"
        );
    }

    // zsh: the script is a valid completion function, and compinit finds it in fpath.
    let zsh = succeeded(
        "zsh",
        &in_home(
            &home,
            "zsh",
            &[
                "-fc",
                "fpath+=(~/.zfunc); autoload -U compinit; compinit -u -D; \
                 print -r -- $_comps[otel-ctx]",
            ],
        ),
    );
    assert_eq!(zsh.trim(), "_otel-ctx", "{zsh}");
    let script = home.join(".zfunc/_otel-ctx");
    succeeded(
        "zsh -n",
        &in_home(&home, "zsh", &["-n", script.to_str().expect("UTF-8")]),
    );

    // fish: loads ~/.config/fish/completions/otel-ctx.fish by itself.
    for (line, expected) in [
        ("otel-ctx pro", "profile\t"),
        ("otel-ctx profile --al", "--all\t"),
        ("otel-ctx profile --format ", "svg\t"),
    ] {
        let said = succeeded(
            "fish",
            &in_home(&home, "fish", &["-c", &format!("complete -C '{line}'")]),
        );
        assert!(
            said.lines().any(|l| l.starts_with(expected)),
            "fish, {line:?}: {said:?}"
        );
    }

    // man: finds ~/.cargo/share/man through ~/.cargo/bin on the PATH; a page per command.
    let page = succeeded(
        "man -w",
        &in_home(&home, "man", &["-w", "otel-ctx-profile"]),
    );
    assert_eq!(
        Path::new(page.trim()),
        home.join(".cargo/share/man/man1/otel-ctx-profile.1")
    );
    let shown = succeeded(
        "man",
        &in_home(&home, "man", &["-P", "cat", "otel-ctx-profile"]),
    );
    assert!(
        shown.contains("--all") && shown.contains("--sampler"),
        "{shown}"
    );
    let main = succeeded("man", &in_home(&home, "man", &["-P", "cat", "otel-ctx"]));
    for command in ["ps", "show", "watch", "check", "profile", "completions"] {
        assert!(main.contains(command), "{command} not in:\n{main}");
    }
    assert!(
        !main.contains("demo-service"),
        "the hidden command is shown"
    );
}

#[test]
fn man_prints_the_page_and_completions_every_shell() {
    let out = support::run(&["man"]);
    let page = succeeded("otel-ctx man", &out);
    assert!(page.contains(".TH otel-ctx 1"), "{page}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = succeeded(shell, &support::run(&["completions", shell]));
        assert!(script.contains("otel-ctx"), "{shell}: {script}");
    }
    let unknown = support::run(&["completions", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(2));
}
