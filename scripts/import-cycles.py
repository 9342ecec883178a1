#!/usr/bin/env python3
"""No circle of files: within each crate, no two files (and no ring of files) import
each other.

For every crate folder given (by default every workspace member), the module tree is
walked from `src/lib.rs`, `src/main.rs` and `src/bin/*.rs`, and a graph of file -> file
edges is built from:

- `use` declarations (`pub use` and `pub(crate) use` re-exports included), with grouped
  trees, renames and globs, whose path starts with `crate`, `super`, `self`, a child
  module of the current module or a name a `use` of the current module brought in;
- inline paths in code, such as `crate::a::b::f(` or `super::fleet::run`, with the same
  starts.

Comments, doc comments, string and character literals are not code, and everything from
a file's first line that starts with `#[cfg(test)]` on is left out (tests may import
anything; `scripts/test.sh` counts a file's lines the same way). `mod x;` declares a
child: it is not an import. A path resolves to the file that defines the module (the
longest prefix of the path that names a module: `a/b.rs`, `a/b/mod.rs`, or the file that
holds an inline `mod b { ... }`); when the item it names is brought into that module by
a `use` (a re-export, or a parent's import its children reach through `super::`), the
edge goes to the file that `use` leads to, the item's definition. Edges from a file to
itself are ignored.

Every strongly connected component of more than one file (Tarjan) is printed with the
edges that close it, and the exit status is 1 if there is any.

    python3 scripts/import-cycles.py                # every workspace member
    python3 scripts/import-cycles.py codec ffi      # those crate folders only
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def strip_code(text):
    """Blanks comments, strings and character literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif re.match(r'(b|c)?r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'(b|c)?r(#*)"', text[i:])
            end = '"' + m.group(2)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c in "bc" and text.startswith('"', i + 1) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A character literal ('a', '\n', '\u{1F600}', b'x' was handled as b then
            # this), or a lifetime ('a), which is kept.
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[i:i + 16])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


TOKEN = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*|r#[A-Za-z_][A-Za-z0-9_]*|::|\S")


def tokenize(code):
    """(text, line) tokens of blanked code."""
    tokens = []
    for lineno, line in enumerate(code.split("\n"), 1):
        for m in TOKEN.finditer(line):
            tokens.append((m.group(0), lineno))
    return tokens


def is_ident(tok):
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok) is not None


def parse_use_tree(tokens, i, prefix, out, line):
    """Parses a use tree at tokens[i]; appends (bound name or None, path, line) to out.

    Returns the index after the tree."""
    path = list(prefix)
    while i < len(tokens):
        tok = tokens[i][0]
        if tok == "{":
            i += 1
            while i < len(tokens) and tokens[i][0] != "}":
                i = parse_use_tree(tokens, i, path, out, tokens[i][1])
                if i < len(tokens) and tokens[i][0] == ",":
                    i += 1
            return i + 1
        if tok == "*":
            out.append((None, path, line))
            return i + 1
        if tok == "::":
            i += 1
            continue
        if is_ident(tok):
            path.append(tok)
            i += 1
            if i < len(tokens) and tokens[i][0] == "::":
                continue
            name = tok
            if i + 1 < len(tokens) and tokens[i][0] == "as":
                name = tokens[i + 1][0]
                i += 2
            if name == "self":
                path.pop()
                name = path[-1] if path else None
            elif path[-1] == "self" and len(path) > 1:
                path.pop()
            out.append((name if name != "_" else None, path, line))
            return i
        return i
    return i


class Module:
    def __init__(self, path, file, child_dir):
        self.path = path  # tuple of names from the crate root
        self.file = file  # the file that holds it (inline modules: their file)
        self.child_dir = child_dir  # where its `mod x;` children live
        self.children = set()
        self.uses = []  # (bound name or None for a glob, relative path, line)
        self.paths = []  # inline paths: (relative path, line)
        self.bindings = {}  # bound name -> absolute path


def parse_file(file, mod_path, child_dir, modules, pending):
    text = open(file, encoding="utf-8").read()
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            lines = lines[:k]
            break
    tokens = tokenize(strip_code("\n".join(lines)))

    top = Module(mod_path, file, child_dir)
    modules[mod_path] = top
    stack = [(top, 0)]  # (module, brace depth it was opened at)
    depth = 0
    attr_path = None
    i = 0
    while i < len(tokens):
        tok, line = tokens[i]
        cur = stack[-1][0]
        if tok == "#" and i + 2 < len(tokens) and tokens[i + 1][0] == "[":
            # An attribute: remember `#[path = "..."]`, skip the rest.
            j, level = i + 1, 0
            while j < len(tokens):
                if tokens[j][0] == "[":
                    level += 1
                elif tokens[j][0] == "]":
                    level -= 1
                    if level == 0:
                        break
                j += 1
            if tokens[i + 2][0] == "path":
                m = re.search(r'#\[path\s*=\s*"([^"]+)"\]', text.split("\n")[line - 1])
                attr_path = m.group(1) if m else None
            i = j + 1
            continue
        if tok == "{":
            depth += 1
        elif tok == "}":
            if len(stack) > 1 and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
        elif tok == "mod" and i + 2 < len(tokens) and is_ident(tokens[i + 1][0]):
            name, after = tokens[i + 1][0], tokens[i + 2][0]
            if after == ";":
                cur.children.add(name)
                child_path = cur.path + (name,)
                if attr_path:
                    base = os.path.dirname(file) if cur is top else cur.child_dir
                    pending.append((child_path, os.path.normpath(os.path.join(base, attr_path)), None))
                else:
                    pending.append((child_path, None, cur.child_dir))
                attr_path = None
                i += 3
                continue
            if after == "{":
                cur.children.add(name)
                child = Module(cur.path + (name,), file, os.path.join(cur.child_dir, name))
                modules[child.path] = child
                depth += 1
                stack.append((child, depth))
                attr_path = None
                i += 3
                continue
        elif tok == "use" and i + 1 < len(tokens) and tokens[i + 1][0] != "<":
            j = i + 1
            if tokens[j][0] == "::":
                j += 1
            j = parse_use_tree(tokens, j, [], cur.uses, line)
            i = j
            continue
        elif is_ident(tok) and i + 2 < len(tokens) and tokens[i + 1][0] == "::" and is_ident(tokens[i + 2][0]):
            prev = tokens[i - 1][0] if i > 0 else ""
            prev2 = tokens[i - 2][0] if i > 1 else ""
            if prev != "::" and not (prev == "in" and prev2 == "("):
                path = [tok]
                j = i + 1
                while j + 1 < len(tokens) and tokens[j][0] == "::" and is_ident(tokens[j + 1][0]):
                    path.append(tokens[j + 1][0])
                    j += 2
                cur.paths.append((path, line))
                i = j
                continue
        if tok not in ("pub", "(", ")", "crate", "in", "super", "self") and not tok.startswith("#"):
            attr_path = None if tok != "]" else attr_path
        i += 1


def load_crate(crate_dir):
    """The modules of every crate root in crate_dir/src: {root file: {path: Module}}."""
    src = os.path.join(crate_dir, "src")
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))]
    bindir = os.path.join(src, "bin")
    if os.path.isdir(bindir):
        for f in sorted(os.listdir(bindir)):
            if f.endswith(".rs"):
                roots.append(os.path.join(bindir, f))
            elif os.path.exists(os.path.join(bindir, f, "main.rs")):
                roots.append(os.path.join(bindir, f, "main.rs"))
    crates = {}
    for root in roots:
        modules = {}
        pending = [((), root, None)]
        while pending:
            mod_path, file, parent_dir = pending.pop()
            if file is None:
                name = mod_path[-1]
                for cand in (os.path.join(parent_dir, name + ".rs"), os.path.join(parent_dir, name, "mod.rs")):
                    if os.path.exists(cand):
                        file = cand
                        break
                else:
                    continue  # a module of another target or platform, absent here
            base = os.path.basename(file)
            if mod_path == () or base == "mod.rs":
                child_dir = os.path.dirname(file)
            else:
                child_dir = os.path.join(os.path.dirname(file), base[:-3])
            parse_file(file, mod_path, child_dir, modules, pending)
        crates[root] = modules
    return crates


def absolute(modules, mod, path):
    """The absolute path of a path written in module mod, or None if outside the crate."""
    path = list(path)
    if not path:
        return None
    first = path[0]
    if first == "crate":
        return path[1:]
    if first in ("super", "self"):
        base = list(mod.path)
        while path and path[0] in ("super", "self"):
            if path.pop(0) == "super":
                if not base:
                    return None
                base.pop()
        return base + path
    if first in mod.children:
        return list(mod.path) + path
    if first in mod.bindings and mod.bindings[first] is not None:
        return list(mod.bindings[first]) + path[1:]
    return None


def resolve(modules, abs_path, seen=None):
    """The file that defines what abs_path names."""
    seen = seen or set()
    key = tuple(abs_path)
    if key in seen:
        return None
    seen.add(key)
    for k in range(len(abs_path), -1, -1):
        prefix = tuple(abs_path[:k])
        if prefix in modules:
            mod = modules[prefix]
            rest = abs_path[k:]
            if rest and rest[0] in mod.bindings:
                if mod.bindings[rest[0]] is None:
                    return None  # brought in from another crate
                target = resolve(modules, list(mod.bindings[rest[0]]) + rest[1:], seen)
                if target:
                    return target
            return mod.file
    return None


def build_graph(modules, rel):
    # A module's bindings: the names its `use` declarations bring in, as absolute paths
    # (iterated, since a `use` may start with a name another `use` brought in).
    for _ in range(4):
        for mod in modules.values():
            for name, path, _line in mod.uses:
                if name is not None and mod.bindings.get(name) is None:
                    # None: another crate's (std, a dependency), whose file is not here.
                    mod.bindings[name] = absolute(modules, mod, path)
    edges = {}
    for mod in modules.values():
        src = rel(mod.file)
        edges.setdefault(src, {})
        for _name, path, line in mod.uses:
            a = absolute(modules, mod, path)
            target = resolve(modules, a) if a is not None else None
            if target and rel(target) != src:
                edges[src].setdefault(rel(target), (line, "use " + "::".join(path)))
        for path, line in mod.paths:
            a = absolute(modules, mod, path)
            target = resolve(modules, a) if a is not None else None
            if target and rel(target) != src:
                edges[src].setdefault(rel(target), (line, "::".join(path)))
    return edges


def tarjan(graph):
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def workspace_members():
    cargo = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    m = re.search(r"members\s*=\s*\[([^\]]*)\]", cargo)
    return re.findall(r'"([^"]+)"', m.group(1))


def main(argv):
    crate_dirs = argv or workspace_members()
    found = 0
    for crate_dir in crate_dirs:
        full = os.path.join(ROOT, crate_dir)
        if not os.path.isdir(os.path.join(full, "src")):
            print(f"{crate_dir}: no src/ folder", file=sys.stderr)
            return 2
        for root, modules in load_crate(full).items():
            edges = build_graph(modules, lambda f: os.path.relpath(f, ROOT))
            for comp in tarjan(edges):
                if len(comp) < 2:
                    continue
                found += 1
                print(f"circle of {len(comp)} files ({os.path.relpath(root, ROOT)}):")
                members = set(comp)
                for src in comp:
                    for dst, (line, what) in sorted(edges[src].items()):
                        if dst in members:
                            print(f"  {src}:{line} -> {dst}  ({what})")
    if found:
        print(f"{found} circle(s) of files", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
