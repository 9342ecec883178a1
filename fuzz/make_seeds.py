#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

Seeds come from the golden vectors in spec-vectors/ (their `hex` fields), from small
ELF files built with gcc (and the aarch64 cross gcc, when installed) from
reader-linux/tests/fixtures/tls/, and from this machine's /proc/self/maps. Each seed
is laid out as its target reads input (see the module docs in fuzz/src/). Committed
regression inputs live apart, in fuzz/seeds/<target>/, and are passed to the fuzzer
as a second corpus.

Usage: fuzz/make_seeds.py   (from anywhere; prints how many seeds each target got)
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VECTORS = os.path.join(ROOT, "spec-vectors")
FIXTURES = os.path.join(ROOT, "reader-linux", "tests", "fixtures", "tls")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")

# Size of the elf_tls trailer (fuzz/src/elf.rs).
ELF_TRAILER_SIZE = 20


def vectors(name):
    with open(os.path.join(VECTORS, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def protobuf_seeds():
    for v in vectors("payload"):
        yield bytes.fromhex(v["hex"])
    # Headers followed by their payload carry one too.
    for v in vectors("header"):
        raw = bytes.fromhex(v["hex"])
        if len(raw) > 32:
            yield raw[32:]


def attrs_seeds():
    # key_map_len (u16, little-endian), then the record's attrs-data.
    for v in vectors("record"):
        raw = bytes.fromhex(v["hex"])
        if len(raw) >= 28:
            yield struct.pack("<H", min(v["key_map_len"], 0xFFFF)) + raw[28:]


def header_seeds():
    for name in ("header", "record"):
        for v in vectors(name):
            yield bytes.fromhex(v["hex"])


CONTEXT_LINES = b"".join(
    b"7f4138bf%d000-7f4138bf%d000 %s 00000000 00:01 %d %s\n" % (i, i + 1, perms, 1000 + i, name)
    for i, (perms, name) in enumerate(
        [
            (b"rw-p", b"/memfd:OTEL_CTX (deleted)"),
            (b"rw-s", b"/memfd:OTEL_CTX"),
            (b"rw-p", b"[anon_shmem:OTEL_CTX]"),
            (b"rw-p", b"[anon:OTEL_CTX]"),
            (b"r-xp", b"[anon:OTEL_CTX]"),
            (b"rw-p", b"[anon:OTEL_CTX] (deleted)"),
            (b"rw-p", b"/memfd:OTEL_CTX_OTHER (deleted)"),
            (b"rw-p", b""),
        ]
    )
)


def maps_seeds():
    # stop, repeat, number of chunk codes, chunk codes, text (fuzz/src/maps.rs).
    with open("/proc/self/maps", "rb") as f:
        own = f.read()
    yield bytes([0, 0, 0]) + own
    yield bytes([0, 0, 0]) + CONTEXT_LINES
    yield bytes([0, 0, 5, 1, 7, 0, 40, 255]) + CONTEXT_LINES
    yield bytes([3, 1, 2, 2, 0]) + CONTEXT_LINES
    yield bytes([0, 3, 1, 90]) + own[:2048] + CONTEXT_LINES
    # A line longer than the scanner's 16 KiB buffer once repeated, and one just short.
    yield bytes([0, 15, 0]) + b"a" * 1100
    yield bytes([0, 15, 1, 200]) + b"7" * 1023 + b"\n"


def build_elves(workdir):
    """Small ELF files in each TLS access model; returns their bytes."""
    src = lambda n: os.path.join(FIXTURES, n)
    builds = [
        ("le", ["-O1", "-pthread", "-DWITH_ALIGNED", "-rdynamic", src("main.c"), src("writer.c")]),
        ("ie-exe", ["-O1", "-pthread", "-fPIC", "-ftls-model=initial-exec", "-rdynamic",
                    src("main.c"), src("writer.c")]),
        ("libdesc.so", ["-O1", "-shared", "-fPIC", "DESC", src("writer.c")]),
        ("libdesc-stripped.so", ["-O1", "-shared", "-fPIC", "-s", "DESC", src("writer.c")]),
        ("libgd.so", ["-O1", "-shared", "-fPIC", "GD", src("writer.c")]),
        ("libie.so", ["-O1", "-shared", "-fPIC", "-ftls-model=initial-exec", src("writer.c")]),
        ("libuser.so", ["-O1", "-shared", "-fPIC", "-ftls-model=initial-exec", src("extern_user.c")]),
        # Hidden: in .symtab only, which other readers do not search.
        ("libhidden.so", ["-O1", "-shared", "-fPIC", "HIDDEN"]),
        ("libld.so", ["-O1", "-shared", "-fPIC", "-ftls-model=local-dynamic", src("local_dynamic.c")]),
    ]
    compilers = [
        ("gcc", "-mtls-dialect=gnu2", "-mtls-dialect=gnu"),
        ("aarch64-linux-gnu-gcc", "-mtls-dialect=desc", "-mtls-dialect=trad"),
    ]
    hidden = os.path.join(workdir, "hidden.c")
    with open(hidden, "w", encoding="utf-8") as f:
        f.write(
            '__attribute__((visibility("hidden"))) __thread void *otel_thread_ctx_v1;\n'
            "void *otel_fixture_slot(void) { return &otel_thread_ctx_v1; }\n"
        )
    out = []
    for cc, desc, gd in compilers:
        if shutil.which(cc) is None:
            print(f"make_seeds: {cc} not found, no {cc} ELF seeds", file=sys.stderr)
            continue
        for name, args in builds:
            args = [{"DESC": desc, "GD": gd, "HIDDEN": hidden}.get(a, a) for a in args]
            path = os.path.join(workdir, f"{cc}-{name}")
            # Segments packed without page padding keep the files small.
            cmd = [cc, *args, "-Wl,-z,noseparate-code", "-Wl,-z,max-page-size=4096", "-o", path]
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                print(f"make_seeds: {' '.join(cmd)} failed:\n{result.stderr}", file=sys.stderr)
                continue
            with open(path, "rb") as f:
                out.append(f.read())
    return out


def elf_trailer(flags, fault_mask, mem_len, bias, tp):
    trailer = struct.pack("<BBHQQ", flags, fault_mask, mem_len, bias, tp)
    assert len(trailer) == ELF_TRAILER_SIZE
    return trailer


def elf_seeds(workdir):
    # Memory: a word that points back into the memory, then the static TLSDESC
    # resolver's code on each architecture, so GOT reads, DTV walks and the resolver
    # check all find something to read.
    memory = (
        struct.pack("<Q", 0x10)
        + struct.pack("<Q", 2)
        + bytes([0x48, 0x8B, 0x40, 0x08, 0xC3, 0, 0, 0])
        + bytes([0x00, 0x04, 0x40, 0xF9, 0xC0, 0x03, 0x5F, 0xD6])
    )
    for elf in build_elves(workdir):
        for flags in (0, 1, 6):
            yield elf + memory + elf_trailer(flags, 0, len(memory), 0x7F00_0000_0000, 0x7F11_2233_4400)
        yield elf + elf_trailer(5, 0x0F, 0, 0x5555_0000_0000, 0x7FFF_0000_1000)


def write(target, seeds):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    count = 0
    for seed in seeds:
        name = "seed-" + hashlib.sha1(seed).hexdigest()
        with open(os.path.join(directory, name), "wb") as f:
            f.write(seed)
        count += 1
    print(f"make_seeds: {target}: {count} seeds")


def main():
    with tempfile.TemporaryDirectory() as workdir:
        write("protobuf_decode", protobuf_seeds())
        write("attrs_decode", attrs_seeds())
        write("header_validate", header_seeds())
        write("maps_line", maps_seeds())
        write("elf_tls", elf_seeds(workdir))


if __name__ == "__main__":
    main()
