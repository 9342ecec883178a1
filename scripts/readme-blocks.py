#!/usr/bin/env python3
"""Checks that the README's code blocks are code the tests compile and run.

Every fenced block preceded by `<!-- compiled: PATH -->` must appear, as it is, in PATH
(a file the tests build and run); every `rust` block must have such a line. Blocks marked
`<!-- checked: SCRIPT -->` are used by that script (scripts/fresh-project.sh takes the
tracing setup's Cargo.toml from the README). Prints what differs and exits 1.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

BLOCK = re.compile(r"(?:<!-- (compiled|checked): (\S+) -->\n)?```(\w*)\n(.*?)```", re.S)
failures = []
for match in BLOCK.finditer(README):
    kind, path, lang, body = match.groups()
    line = README.count("\n", 0, match.start()) + 1
    if kind == "compiled":
        target = ROOT / path
        if not target.is_file():
            failures.append(f"README.md:{line}: {path} does not exist")
        elif body not in target.read_text():
            failures.append(f"README.md:{line}: the block is not in {path} as it is")
    elif kind == "checked":
        if not (ROOT / path).is_file():
            failures.append(f"README.md:{line}: {path} does not exist")
    elif lang == "rust":
        failures.append(f"README.md:{line}: a rust block that no test compiles")
for failure in failures:
    print(failure, file=sys.stderr)
if failures:
    sys.exit(1)
print("every compiled block of README.md is in the file that compiles it")
