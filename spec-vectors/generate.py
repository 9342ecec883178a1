#!/usr/bin/env python3
"""Builds the golden spec vectors of this folder: header.json, payload.json, record.json.

The bytes do not come from any implementation in this repository:
- valid payloads are written in protobuf text format and encoded by `protoc --encode`
  against proto/process_context.proto (payloads with unknown fields against
  proto/with_unknown_fields.proto, whose messages carry extra fields);
- malformed payloads, and a few valid ones that text format cannot express, are spelled
  out byte by byte with the small wire helpers below, each with a comment;
- headers and records are packed with `struct`, little-endian (the host order of both
  x86_64 and aarch64).
The expected values are written down from the same descriptions, never decoded back.

    python3 spec-vectors/generate.py           rewrite the JSON files
    python3 spec-vectors/generate.py --check   exit 1 if a JSON file is not up to date

Needs only python3 and protoc.
"""

import argparse
import json
import math
import pathlib
import re
import struct
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
PROTO_DIR = HERE / "proto"
PROCESS_CONTEXT = "opentelemetry.proto.processcontext.v1development.ProcessContext"
PROCESS_CONTEXT_WITH_UNKNOWN = "spec_vectors.with_unknown_fields.ProcessContext"

# Defaults a runner applies when a vector does not say otherwise (see README.md).
DEFAULT_MAX_PAYLOAD_SIZE = 65536
DEFAULT_MAX_DEPTH = 16
DEFAULT_MAX_ATTRIBUTES = 2048
DEFAULT_MAX_RECORD_SIZE = 640

SCHEMA_VERSION_KEY = "threadlocal.schema_version"
ATTRIBUTE_KEY_MAP_KEY = "threadlocal.attribute_key_map"
MAX_KEY_MAP_LEN = 256

# JSON numbers above this lose precision in many languages: such u64 go as strings.
MAX_SAFE_INTEGER = 2**53 - 1

NAME_RE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


# ---------------------------------------------------------------------------------------
# Vector bookkeeping
# ---------------------------------------------------------------------------------------


def vector(name, description, spec, data, inputs=None, expected=None, error=None):
    """One vector as an ordered dict, checked for the rules of README.md."""
    assert NAME_RE.match(name), f"{name}: not snake_case"
    assert description.endswith(".") and description.count(". ") == 0, (
        f"{name}: the description must be one sentence"
    )
    assert spec.startswith("OTEP 4719 ") or spec.startswith("OTEP 4947 "), name
    assert (expected is None) != (error is None), f"{name}: exactly one of expected/error"
    v = {"name": name, "description": description, "spec": spec}
    v.update(inputs or {})
    v["hex"] = bytes(data).hex()
    if expected is not None:
        v["expected"] = expected
    else:
        v["error"] = error
    return v


def u64_json(n):
    """A u64 for JSON: a number when exact in a double, a decimal string otherwise."""
    return n if n <= MAX_SAFE_INTEGER else str(n)


def dump(vectors):
    """The JSON text of a vector file: one key per line, values compact."""
    names = [v["name"] for v in vectors]
    assert len(names) == len(set(names)), "duplicate vector names"
    out = ["["]
    for i, v in enumerate(vectors):
        fields = ",\n".join(
            f"    {json.dumps(k)}: {json.dumps(val, ensure_ascii=False, allow_nan=False)}"
            for k, val in v.items()
        )
        out.append("  {\n" + fields + "\n  }" + ("," if i + 1 < len(vectors) else ""))
    out.append("]")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# Header (OTEP 4719): 32 bytes, little-endian
# ---------------------------------------------------------------------------------------

SIGNATURE = b"OTEL_CTX"


def pack_header(signature=SIGNATURE, version=2, payload_size=187,
                monotonic_published_at_ns=86_400_123_456_789, payload=0x7F3A_1C40_0020):
    return struct.pack("<8sIIQQ", signature, version, payload_size,
                       monotonic_published_at_ns, payload)


def read_header(data, max_payload_size):
    """The reading rules of README.md, in their order: returns (expected, error)."""
    if len(data) < 32:
        return None, "truncated"
    sig, version, size, ts, addr = struct.unpack_from("<8sIIQQ", data)
    if sig != SIGNATURE:
        return None, "bad_signature"
    if version != 2:
        return None, "unsupported_version"
    if ts == 0:
        return None, "being_updated"
    if size == 0:
        return None, "empty_payload"
    if size > max_payload_size:
        return None, "payload_too_large"
    return {
        "signature": sig.decode("ascii"),
        "version": version,
        "payload_size": size,
        "monotonic_published_at_ns": u64_json(ts),
        "payload": u64_json(addr),
    }, None


def header_vector(name, description, spec, data, want_error=None, max_payload_size=None):
    inputs = {}
    limit = DEFAULT_MAX_PAYLOAD_SIZE
    if max_payload_size is not None:
        inputs["max_payload_size"] = max_payload_size
        limit = max_payload_size
    expected, error = read_header(data, limit)
    assert error == want_error, f"{name}: reads as {error}, meant {want_error}"
    return vector(name, description, spec, data, inputs, expected, error)


def header_vectors():
    H = "OTEP 4719 header: "
    v = []
    add = v.append
    add(header_vector(
        "valid_typical", "A published header with a 187-byte payload elsewhere in memory.",
        H + "layout", pack_header()))
    payload = bytes.fromhex("0a060a040a02786b")
    add(header_vector(
        "valid_payload_right_after_header",
        "The payload lies right after the header; bytes after the 32 header bytes are not "
        "part of the header.",
        H + "layout",
        pack_header(payload_size=len(payload), payload=0x7F3A_1C40_0020) + payload))
    add(header_vector(
        "valid_timestamp_one", "Any non-zero monotonic_published_at_ns marks a readable header.",
        H + "monotonic_published_at_ns", pack_header(monotonic_published_at_ns=1)))
    add(header_vector(
        "valid_payload_size_one", "The smallest non-empty payload_size.",
        H + "payload_size", pack_header(payload_size=1)))
    add(header_vector(
        "valid_payload_size_at_default_limit",
        "A payload_size of exactly 65536 bytes is within the default limit.",
        H + "payload_size limit", pack_header(payload_size=65536)))
    add(header_vector(
        "payload_size_over_default_limit",
        "A payload_size of 65537 bytes is over the default limit of 65536.",
        H + "payload_size limit", pack_header(payload_size=65537), "payload_too_large"))
    add(header_vector(
        "payload_size_u32_max", "The largest u32 payload_size is refused, not allocated.",
        H + "payload_size limit", pack_header(payload_size=0xFFFF_FFFF), "payload_too_large"))
    add(header_vector(
        "payload_size_at_custom_limit",
        "A payload_size equal to a reader's own limit of 4096 is accepted.",
        H + "payload_size limit", pack_header(payload_size=4096), max_payload_size=4096))
    add(header_vector(
        "payload_size_over_custom_limit",
        "A payload_size one byte over a reader's own limit of 4096 is refused.",
        H + "payload_size limit", pack_header(payload_size=4097), "payload_too_large",
        max_payload_size=4096))
    add(header_vector(
        "empty_payload", "A payload_size of 0 is refused.",
        H + "payload_size", pack_header(payload_size=0), "empty_payload"))
    add(header_vector(
        "being_updated",
        "A zero monotonic_published_at_ns means the publisher is changing the context.",
        H + "monotonic_published_at_ns", pack_header(monotonic_published_at_ns=0),
        "being_updated"))
    add(header_vector(
        "bad_signature_last_byte", "All eight signature bytes are compared, the last one too.",
        H + "signature", pack_header(signature=b"OTEL_CTx"), "bad_signature"))
    add(header_vector(
        "bad_signature_first_byte", "A signature differing in its first byte is refused.",
        H + "signature", pack_header(signature=b"XTEL_CTX"), "bad_signature"))
    add(header_vector(
        "bad_signature_nul_terminated",
        "The signature is not a C string: a NUL in place of the last byte is refused.",
        H + "signature", pack_header(signature=b"OTEL_CT\0"), "bad_signature"))
    add(header_vector(
        "bad_signature_all_zero", "A zero-filled mapping is not a process context.",
        H + "signature", bytes(32), "bad_signature"))
    add(header_vector(
        "unsupported_version_1", "Version 1 (development) is not read by a version 2 reader.",
        H + "version", pack_header(version=1), "unsupported_version"))
    add(header_vector(
        "unsupported_version_3", "A future version 3 is refused.",
        H + "version", pack_header(version=3), "unsupported_version"))
    add(header_vector(
        "unsupported_version_byte_swapped",
        "Version 2 written big-endian reads as 0x02000000 in host order and is refused.",
        H + "version",
        SIGNATURE + struct.pack(">I", 2) + pack_header()[12:], "unsupported_version"))
    add(header_vector(
        "truncated_31_bytes", "One byte short of a header.",
        H + "layout", pack_header()[:31], "truncated"))
    add(header_vector(
        "truncated_signature_only", "Only the eight signature bytes.",
        H + "layout", SIGNATURE, "truncated"))
    add(header_vector(
        "truncated_empty", "No bytes at all.", H + "layout", b"", "truncated"))
    add(header_vector(
        "order_signature_before_version",
        "With a bad signature and a bad version, the signature is reported.",
        H + "check order", pack_header(signature=b"OTEL_CTY", version=9), "bad_signature"))
    add(header_vector(
        "order_version_before_timestamp",
        "With a bad version and a zero timestamp, the version is reported.",
        H + "check order", pack_header(version=3, monotonic_published_at_ns=0),
        "unsupported_version"))
    add(header_vector(
        "order_timestamp_before_empty_payload",
        "With a zero timestamp and a zero payload_size, the timestamp is reported.",
        H + "check order", pack_header(monotonic_published_at_ns=0, payload_size=0),
        "being_updated"))
    add(header_vector(
        "order_timestamp_before_payload_limit",
        "With a zero timestamp and a payload_size over the limit, the timestamp is reported.",
        H + "check order", pack_header(monotonic_published_at_ns=0, payload_size=1 << 20),
        "being_updated"))
    add(header_vector(
        "big_values_as_strings",
        "A timestamp and an address above 2^53 are written in expected as decimal strings.",
        H + "layout",
        pack_header(monotonic_published_at_ns=0x8000_0000_0000_0001,
                    payload=0xFFFF_8000_0000_1000)))
    return v


# ---------------------------------------------------------------------------------------
# Record (OTEP 4947): 28-byte header + attrs_data, little-endian
# ---------------------------------------------------------------------------------------

TRACE_ID = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
SPAN_ID = bytes.fromhex("00f067aa0ba902b7")


def entries(*pairs):
    """attrs_data: `key: u8, len: u8, value` per entry, packed."""
    out = b""
    for key, value in pairs:
        value = value.encode() if isinstance(value, str) else value
        assert len(value) <= 255
        out += bytes([key, len(value)]) + value
    return out


def pack_record(attrs_data=b"", trace_id=TRACE_ID, span_id=SPAN_ID, valid=1, trace_flags=1,
                attrs_data_size=None, after=b""):
    """A record; attrs_data_size defaults to len(attrs_data); `after` follows the bytes."""
    size = len(attrs_data) if attrs_data_size is None else attrs_data_size
    return (trace_id + span_id + struct.pack("<BBH", valid, trace_flags, size)
            + attrs_data + after)


def shown(value):
    """A value as the vectors show it: UTF-8 text, each byte that is not valid UTF-8 as
    U+FFFD (the vectors only use bytes that are never valid, so every decoder agrees)."""
    return value.decode("utf-8", errors="replace")


def is_utf8(value):
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def read_record(data, key_map_len, max_record_size):
    """The reading rules of README.md: returns every outcome a conforming reader may give,
    each (expected, error); more than one where OTEP 4947 leaves the choice to the reader.

    OTEP 4947 only recommends records of at most 640 bytes, and its one MUST about
    attrs_data is to stop at an entry that does not fit: a reader that copies at most
    max_record_size bytes keeps the ids and every entry complete within them, a reader
    that copies the whole record keeps them all; neither refuses the record. It says
    nothing of a value that is not UTF-8: a reader keeps it or drops that one entry, and
    reads on, since its length still says where the next entry starts."""
    if len(data) < 28:
        return [(None, "truncated")]
    trace_id, span_id = data[:16], data[16:24]
    valid, flags, size = struct.unpack_from("<BBH", data, 24)
    whole = 28 + size
    copies = [whole] if whole <= max_record_size else [max_record_size, whole]
    outcomes = []
    for end in copies:
        if end > len(data):
            outcomes.append((None, "attrs_past_end"))
            continue
        attrs = data[28:end]
        raw = []
        pos = 0
        while pos + 2 <= len(attrs) and pos + 2 + attrs[pos + 1] <= len(attrs):
            key, n = attrs[pos], attrs[pos + 1]
            raw.append((key, attrs[pos + 2:pos + 2 + n]))
            pos += 2 + n
        keeps = [True] if all(is_utf8(value) for _, value in raw) else [True, False]
        for keep_non_utf8 in keeps:
            resolved = {}
            for key, value in raw:
                if key < key_map_len and (keep_non_utf8 or is_utf8(value)):
                    resolved[key] = shown(value)
            outcomes.append(({
                "trace_id": trace_id.hex(),
                "span_id": span_id.hex(),
                "valid": valid == 1,
                "trace_flags": flags,
                "attrs_data_size": size,
                "entries": [[key, shown(value)] for key, value in raw],
                "incomplete": pos != len(attrs),
                "attributes": [[k, resolved[k]] for k in sorted(resolved)],
            }, None))
    distinct = []
    for outcome in outcomes:
        if outcome not in distinct:
            distinct.append(outcome)
    return distinct


def record_vector(name, description, spec, data, key_map_len, want_error=None,
                  max_record_size=DEFAULT_MAX_RECORD_SIZE, choices=1):
    """A record vector; `choices` is how many outcomes the spec allows (then `expected` is
    `{"either": [...]}`), so that a vector never offers a choice by accident."""
    inputs = {"key_map_len": key_map_len, "max_record_size": max_record_size}
    outcomes = read_record(data, key_map_len, max_record_size)
    assert len(outcomes) == choices, f"{name}: {len(outcomes)} outcomes, meant {choices}"
    if choices == 1:
        expected, error = outcomes[0]
        assert error == want_error, f"{name}: reads as {error}, meant {want_error}"
    else:
        # A choice is between values: a reader never chooses to fail.
        assert want_error is None and all(e is None for _, e in outcomes), name
        expected, error = {"either": [x for x, _ in outcomes]}, None
    return vector(name, description, spec, data, inputs, expected, error)


def record_vectors():
    R = "OTEP 4947 record: "
    v = []
    add = v.append
    add(record_vector(
        "no_attributes", "A valid record with ids, sampled flag and no attributes.",
        R + "layout", pack_record(), 2))
    add(record_vector(
        "one_attribute", "One attribute, key index 0.",
        R + "attrs_data", pack_record(entries((0, "GET"))), 2))
    add(record_vector(
        "two_attributes", "Two attributes that fit in a 64-byte cache line.",
        R + "attrs_data", pack_record(entries((0, "GET"), (1, "/api/v1/orders"))), 2))
    many = [(k, f"value-{k}") for k in range(12)]
    add(record_vector(
        "many_attributes", "Twelve attributes with distinct key indexes.",
        R + "attrs_data", pack_record(entries(*many)), 12))
    add(record_vector(
        "valid_zero", "valid = 0: the fields still parse but a reader ignores the record.",
        R + "valid", pack_record(entries((0, "GET")), valid=0), 2))
    add(record_vector(
        "valid_two", "valid = 2 is not 1, so the record is not valid.",
        R + "valid", pack_record(entries((0, "GET")), valid=2), 2))
    add(record_vector(
        "zero_ids_no_trace", "All-zero ids and zero flags: attributes without a trace.",
        R + "trace_id and span_id",
        pack_record(entries((0, "worker")), trace_id=bytes(16), span_id=bytes(8),
                    trace_flags=0), 1))
    # The writer MUST set both ids or neither; readers use what they find.
    add(record_vector(
        "trace_id_without_span_id",
        "Only trace_id is set, which a writer must not do: a reader reports the ids as they "
        "are and reads the attributes.",
        R + "trace_id and span_id",
        pack_record(entries((0, "GET")), span_id=bytes(8)), 1))
    add(record_vector(
        "span_id_without_trace_id",
        "Only span_id is set, which a writer must not do: a reader reports the ids as they "
        "are and reads the attributes.",
        R + "trace_id and span_id",
        pack_record(entries((0, "GET")), trace_id=bytes(16)), 1))
    add(record_vector(
        "trace_flags_sampled", "trace_flags 0x01 (sampled) is carried as is.",
        R + "trace_flags", pack_record(trace_flags=0x01), 0))
    add(record_vector(
        "trace_flags_sampled_random", "trace_flags 0x03 (sampled and random) is carried as is.",
        R + "trace_flags", pack_record(trace_flags=0x03), 0))
    add(record_vector(
        "trailing_partial_entry_1_byte",
        "attrs_data ends with a lone key byte: the reader stops before it.",
        R + "incomplete entry", pack_record(entries((0, "GET")) + bytes([1])), 2))
    add(record_vector(
        "trailing_partial_entry_2_bytes",
        "attrs_data ends with a key and a non-zero length but no value bytes.",
        R + "incomplete entry", pack_record(entries((0, "GET")) + bytes([1, 4])), 2))
    add(record_vector(
        "trailing_partial_entry_short_value",
        "The last entry's length says 10 bytes but only 3 remain in attrs_data.",
        R + "incomplete entry",
        pack_record(entries((0, "GET")) + bytes([1, 10]) + b"/ap"), 2))
    add(record_vector(
        "only_partial_entry", "attrs_data is a single byte: no complete entry at all.",
        R + "incomplete entry", pack_record(bytes([0])), 2))
    add(record_vector(
        "attrs_data_size_hides_later_bytes",
        "Bytes past attrs_data_size (a shrunk record) are not read, even when they look "
        "like entries.",
        R + "attrs_data_size",
        pack_record(entries((0, "GET"), (1, "/a")), attrs_data_size=5,
                    after=b""), 2))
    add(record_vector(
        "attrs_data_size_cuts_an_entry",
        "attrs_data_size ends inside the second entry, which is therefore incomplete.",
        R + "attrs_data_size",
        pack_record(entries((0, "GET"), (1, "/api")), attrs_data_size=7), 2))
    add(record_vector(
        "bytes_after_record_ignored",
        "Bytes after the record's 28 + attrs_data_size bytes are not part of it.",
        R + "attrs_data_size",
        pack_record(entries((0, "GET")), after=entries((1, "/stale"))), 2))
    add(record_vector(
        "attrs_past_end", "attrs_data_size says 10 bytes but only 5 follow the header.",
        R + "attrs_data_size",
        pack_record(entries((0, "GET")), attrs_data_size=10), 2, "attrs_past_end"))
    add(record_vector(
        "attrs_past_end_header_only",
        "A bare 28-byte header whose attrs_data_size is 1.",
        R + "attrs_data_size", pack_record(attrs_data_size=1), 2, "attrs_past_end"))
    add(record_vector(
        "duplicate_key_last_wins", "Key 0 twice: the last occurrence wins.",
        R + "last occurrence wins",
        pack_record(entries((0, "GET"), (1, "/a"), (0, "POST"))), 2))
    add(record_vector(
        "duplicate_key_appended_update",
        "A value updated three times by appending: the last of three wins.",
        R + "last occurrence wins",
        pack_record(entries((1, "a"), (1, "bb"), (0, "x"), (1, "ccc"))), 2))
    add(record_vector(
        "key_index_out_of_range",
        "Key index 5 with a key map of 2 names is dropped from the attributes.",
        R + "key index outside the key map",
        pack_record(entries((0, "GET"), (5, "unknown"), (1, "/a"))), 2))
    add(record_vector(
        "key_map_empty_drops_all", "Without a key map every key index is out of range.",
        R + "key index outside the key map",
        pack_record(entries((0, "GET"), (1, "/a"))), 0))
    add(record_vector(
        "key_index_255_with_full_key_map",
        "Key index 255 is the last one a 256-name key map can resolve.",
        R + "key index outside the key map", pack_record(entries((255, "last"))), 256))
    add(record_vector(
        "attributes_sorted_by_key_index",
        "Resolved attributes are listed by key index, not by wire order.",
        R + "last occurrence wins",
        pack_record(entries((5, "e"), (1, "a"), (3, "c"))), 6))
    add(record_vector(
        "empty_value", "An entry with length 0 is complete and has an empty value.",
        R + "attrs_data", pack_record(entries((0, ""), (1, "x"))), 2))
    add(record_vector(
        "value_255_bytes", "The longest value one entry can hold.",
        R + "attrs_data", pack_record(entries((0, "v" * 255))), 1))
    add(record_vector(
        "utf8_multibyte_value", "Values are UTF-8 and may hold multi-byte characters.",
        R + "attrs_data", pack_record(entries((0, "/café/日本"))), 1))
    add(record_vector(
        "value_not_utf8",
        "The second value is the bytes ff fe, never UTF-8: a reader keeps or drops that "
        "entry and still reads the entries after it.",
        R + "attrs_data",
        pack_record(entries((0, "GET"), (1, b"\xff\xfe"), (2, "/a"))), 3, choices=2))
    add(record_vector(
        "attrs_data_size_byte_order",
        "attrs_data_size 258 is stored as the bytes 02 01 (little-endian host order).",
        R + "layout", pack_record(entries((0, "w" * 254), (1, ""))), 2))
    # 28 + 257 + 257 + 98 = 640.
    add(record_vector(
        "exactly_640_bytes", "A record of exactly 640 bytes is within the bound.",
        R + "size bound",
        pack_record(entries((0, "a" * 255), (1, "b" * 255), (2, "c" * 96))), 3))
    # 640 bytes is a recommendation to writers: a reader that copies 640 bytes has the
    # ids and the first two entries, one that copies the whole record has all three.
    add(record_vector(
        "record_641_bytes_over_bound",
        "A record of 641 bytes, one over the recommended 640: a reader keeps the ids and "
        "every entry complete within the bytes it copies.",
        R + "size bound",
        pack_record(entries((0, "a" * 255), (1, "b" * 255), (2, "c" * 97))), 3,
        choices=2))
    # 28 + 2 + 34 = 64.
    add(record_vector(
        "compact_64_bytes", "A 64-byte record fits a reader bound of 64.",
        R + "size bound", pack_record(entries((0, "p" * 34))), 1, max_record_size=64))
    add(record_vector(
        "record_65_bytes_over_custom_bound",
        "A 65-byte record over a reader bound of 64: the ids, and the entry only if the "
        "reader copies the whole record.",
        R + "size bound", pack_record(entries((0, "p" * 35))), 1, max_record_size=64,
        choices=2))
    add(record_vector(
        "over_bound_attrs_past_end",
        "A header claiming 65535 attrs bytes with none following: neither a bounded nor a "
        "whole copy can be read.",
        R + "attrs_data_size", pack_record(attrs_data_size=0xFFFF), 2, "attrs_past_end"))
    add(record_vector(
        "truncated_27_bytes", "One byte short of the 28-byte header.",
        R + "layout", pack_record()[:27], 2, "truncated"))
    add(record_vector(
        "truncated_empty", "No bytes at all.", R + "layout", b"", 2, "truncated"))
    return v


# ---------------------------------------------------------------------------------------
# Payload (OTEP 4719 ProcessContext): a model, its text format and its expected JSON
# ---------------------------------------------------------------------------------------
#
# A value is a tuple (kind, x): ("string", str), ("bool", bool), ("int", int),
# ("double", float), ("bytes", bytes), ("array", [value]), ("kvlist", [KV]),
# ("empty", None). A KV is (key, value) where value None leaves the field unset.


def s(x):
    return ("string", x)


def bo(x):
    return ("bool", x)


def i(x):
    return ("int", x)


def d(x):
    return ("double", x)


def by(x):
    return ("bytes", x)


def arr(*xs):
    return ("array", list(xs))


def kvl(*kvs):
    return ("kvlist", list(kvs))


EMPTY = ("empty", None)


class Ctx:
    """A ProcessContext: `resource` None leaves field 1 unset; `unknown` names the
    messages that get one extra field of each wire type (with_unknown_fields.proto)."""

    def __init__(self, resource=None, attributes=(), resource_dropped=None, unknown=()):
        self.resource = resource
        self.attributes = list(attributes)
        self.resource_dropped = resource_dropped
        self.unknown = set(unknown)
        assert self.unknown <= {"ProcessContext", "Resource", "KeyValue", "AnyValue",
                                "ArrayValue", "KeyValueList"}


def quote(raw):
    """A text-format string literal for arbitrary bytes."""
    out = []
    for b in raw:
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def text_double(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def text_unknown(ctx, message):
    if message not in ctx.unknown:
        return ""
    # One field of each wire type: varint, i64, len, i32.
    return (" unknown_varint: 150 unknown_i64: 0x0102030405060708"
            ' unknown_len: "\\000skip\\377" unknown_i32: 0xdeadbeef')


def text_value(ctx, v):
    kind, x = v
    if kind == "string":
        body = f"string_value: {quote(x.encode())}"
    elif kind == "bool":
        body = f"bool_value: {'true' if x else 'false'}"
    elif kind == "int":
        body = f"int_value: {x}"
    elif kind == "double":
        body = f"double_value: {text_double(x)}"
    elif kind == "bytes":
        body = f"bytes_value: {quote(x)}"
    elif kind == "array":
        inner = " ".join(f"values {{ {text_value(ctx, e)} }}" for e in x)
        body = f"array_value {{ {inner}{text_unknown(ctx, 'ArrayValue')} }}"
    elif kind == "kvlist":
        inner = " ".join(f"values {{ {text_kv(ctx, kv)} }}" for kv in x)
        body = f"kvlist_value {{ {inner}{text_unknown(ctx, 'KeyValueList')} }}"
    else:
        body = ""
    return body + text_unknown(ctx, "AnyValue")


def text_kv(ctx, kv):
    key, value = kv
    parts = f"key: {quote(key.encode())}"
    if value is not None:
        parts += f" value {{ {text_value(ctx, value)} }}"
    return parts + text_unknown(ctx, "KeyValue")


def text_ctx(ctx):
    out = []
    if ctx.resource is not None:
        inner = " ".join(f"attributes {{ {text_kv(ctx, kv)} }}" for kv in ctx.resource)
        if ctx.resource_dropped is not None:
            inner += f" dropped_attributes_count: {ctx.resource_dropped}"
        out.append(f"resource {{ {inner}{text_unknown(ctx, 'Resource')} }}")
    for kv in ctx.attributes:
        out.append(f"attributes {{ {text_kv(ctx, kv)} }}")
    out.append(text_unknown(ctx, "ProcessContext"))
    return "\n".join(out) + "\n"


def protoc_encode(ctx):
    """The payload bytes of `ctx`, encoded by protoc from text format."""
    if ctx.unknown:
        proto, message = "with_unknown_fields.proto", PROCESS_CONTEXT_WITH_UNKNOWN
    else:
        proto, message = "process_context.proto", PROCESS_CONTEXT
    try:
        result = subprocess.run(
            ["protoc", f"--proto_path={PROTO_DIR}", f"--encode={message}", proto],
            input=text_ctx(ctx).encode(), capture_output=True, check=False)
    except FileNotFoundError:
        sys.exit("protoc is not on the PATH; install it (Debian: apt-get install "
                 "protobuf-compiler)")
    if result.returncode != 0:
        sys.exit(f"protoc --encode failed: {result.stderr.decode(errors='replace')}\n"
                 f"input:\n{text_ctx(ctx)}")
    return result.stdout


def json_double(x):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def json_value(v):
    if v is None:
        return {}
    kind, x = v
    if kind == "string":
        return {"string": x}
    if kind == "bool":
        return {"bool": x}
    if kind == "int":
        assert -(2**63) <= x < 2**63
        return {"int": str(x)}
    if kind == "double":
        return {"double": json_double(x)}
    if kind == "bytes":
        return {"bytes": x.hex()}
    if kind == "array":
        return {"array": [json_value(e) for e in x]}
    if kind == "kvlist":
        return {"kvlist": [json_kv(kv) for kv in x]}
    assert kind == "empty"
    return {}


def json_kv(kv):
    key, value = kv
    return {"key": key, "value": json_value(value)}


def threadlocal(attributes):
    """The reference-data rules of README.md: (threadlocal, threadlocal_error)."""
    def last(key):
        found = [kv for kv in attributes if kv[0] == key]
        return found[-1] if found else None

    schema, key_map = last(SCHEMA_VERSION_KEY), last(ATTRIBUTE_KEY_MAP_KEY)
    if schema is None and key_map is None:
        return None, None
    out = {"schema_version": None, "key_map": None}
    if schema is not None:
        if schema[1] is None or schema[1][0] != "string":
            return None, "schema_version_not_string"
        out["schema_version"] = schema[1][1]
    if key_map is not None:
        if key_map[1] is None or key_map[1][0] != "array":
            return None, "key_map_not_array"
        names = []
        for element in key_map[1][1]:
            if element[0] != "string":
                return None, "key_map_element_not_string"
            names.append(element[1])
        if len(names) > MAX_KEY_MAP_LEN:
            return None, "key_map_too_long"
        out["key_map"] = names
    return out, None


def expected_of(*ctxs):
    """The expected JSON of the concatenation of `ctxs` (protobuf merges them)."""
    resource, attributes = [], []
    for ctx in ctxs:
        resource += ctx.resource or []
        attributes += ctx.attributes
    out = {
        "resource": [json_kv(kv) for kv in resource],
        "attributes": [json_kv(kv) for kv in attributes],
    }
    tl, tl_error = threadlocal(attributes)
    if tl is not None:
        out["threadlocal"] = tl
    if tl_error is not None:
        out["threadlocal_error"] = tl_error
    return out


# Hand-crafting helpers for bytes that text format cannot express.


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(field, wire_type):
    return varint(field << 3 | wire_type)


def ld(field, body):
    """A length-delimited field."""
    return tag(field, 2) + varint(len(body)) + body


def kv_bytes(key, value_body=None):
    """KeyValue body: key (field 1) and, if given, value (field 2) around an AnyValue body."""
    out = ld(1, key.encode())
    if value_body is not None:
        out += ld(2, value_body)
    return out


def av_string(x):
    return ld(1, x.encode())


def payload_vector(name, description, spec, data, expected=None, error=None, limits=None):
    inputs = dict(limits or {})
    return vector(name, description, spec, data, inputs, expected, error)


def c_reference_ctx():
    """Shaped like the C reference writer's payload: the seven semantic-convention keys,
    extra resource attributes, and the threadlocal.* reference data in field 2."""
    return Ctx(
        resource=[
            ("service.name", s("checkout")),
            ("service.instance.id", s("4f9a1c2e-8b7d-4e6f-9a0b-1c2d3e4f5a6b")),
            ("service.version", s("1.4.2")),
            ("deployment.environment.name", s("production")),
            ("telemetry.sdk.language", s("cpp")),
            ("telemetry.sdk.name", s("opentelemetry")),
            ("telemetry.sdk.version", s("1.21.0")),
            ("host.name", s("web-01")),
            ("process.executable.name", s("checkout-server")),
        ],
        attributes=[
            (SCHEMA_VERSION_KEY, s("tlsdesc_v1_dev")),
            (ATTRIBUTE_KEY_MAP_KEY, arr(s("http.route"), s("http.request.method"),
                                        s("user.id"))),
        ],
    )


def nest_arrays(depth, leaf):
    """A value `depth` levels deep: arrays around `leaf` (depth 1 is the leaf itself)."""
    v = leaf
    for _ in range(depth - 1):
        v = arr(v)
    return v


def nest_kvlists(depth, leaf):
    v = leaf
    for _ in range(depth - 1):
        v = kvl(("k", v))
    return v


def payload_vectors():
    P = "OTEP 4719 payload: "
    W = "OTEP 4719 payload: protobuf wire format, "
    L = "OTEP 4719 payload: reader limits, "
    T = "OTEP 4947 reference data: "
    v = []

    def valid(name, description, spec, *ctxs, limits=None):
        data = b"".join(protoc_encode(c) for c in ctxs)
        v.append(payload_vector(name, description, spec, data, expected_of(*ctxs),
                                limits=limits))

    def crafted(name, description, spec, data, ctx=None, error=None, limits=None):
        expected = expected_of(ctx) if ctx is not None else None
        v.append(payload_vector(name, description, spec, data, expected, error, limits))

    # --- Valid payloads, encoded by protoc -------------------------------------------
    valid("c_reference_writer_shape",
          "The seven semantic-convention resource keys, two extra ones, and the "
          "threadlocal reference data in the extra attributes.",
          P + "ProcessContext", c_reference_ctx())
    valid("empty_message", "Zero bytes decode as a ProcessContext with nothing set.",
          P + "ProcessContext", Ctx())
    valid("empty_resource", "A Resource that is present but has no attributes.",
          P + "ProcessContext", Ctx(resource=[]))
    valid("every_any_value_kind",
          "One attribute of each AnyValue kind, plus an AnyValue with no field set.",
          P + "AnyValue",
          Ctx(resource=[
              ("string", s("text")),
              ("bool", bo(True)),
              ("int", i(42)),
              ("double", d(1.5)),
              ("bytes", by(b"\x00\x01\xfe\xff")),
              ("array", arr(s("a"), i(1))),
              ("kvlist", kvl(("inner", bo(False)))),
              ("empty", EMPTY),
          ]))
    valid("string_values",
          "Empty, multi-byte, four-byte and control-character strings.",
          P + "AnyValue string_value",
          Ctx(attributes=[
              ("empty", s("")),
              ("japanese", s("日本語")),
              ("emoji", s("🦀")),
              ("controls", s("tab\tnewline\nnul\0quote\"backslash\\")),
          ]))
    valid("bool_values", "true and false; false is still present in the oneof.",
          P + "AnyValue bool_value",
          Ctx(attributes=[("yes", bo(True)), ("no", bo(False))]))
    valid("int_values",
          "Zero, negative numbers, the int64 extremes and a value beyond 2^53.",
          P + "AnyValue int_value",
          Ctx(attributes=[
              ("zero", i(0)), ("one", i(1)), ("minus_one", i(-1)),
              ("max", i(2**63 - 1)), ("min", i(-(2**63))),
              ("beyond_2_53", i(2**53 + 1)),
          ]))
    valid("double_values",
          "Zero, negative zero, fractions, the largest and smallest magnitudes.",
          P + "AnyValue double_value",
          Ctx(attributes=[
              ("zero", d(0.0)), ("negative_zero", d(-0.0)), ("half", d(1.5)),
              ("tenth", d(0.1)), ("negative", d(-2.5)), ("huge", d(1e300)),
              ("max", d(sys.float_info.max)), ("subnormal", d(5e-324)),
          ]))
    valid("double_special_values",
          "Infinities and NaN, written in expected as the strings Infinity, -Infinity, NaN.",
          P + "AnyValue double_value",
          Ctx(attributes=[
              ("inf", d(math.inf)), ("minus_inf", d(-math.inf)), ("nan", d(math.nan)),
          ]))
    valid("bytes_values",
          "Empty bytes, bytes that are not UTF-8 (allowed in bytes_value), and all 256 "
          "byte values.",
          P + "AnyValue bytes_value",
          Ctx(attributes=[
              ("empty", by(b"")),
              ("not_utf8", by(b"\xc3\x28\xff")),
              ("all", by(bytes(range(256)))),
          ]))
    valid("nested_arrays_and_kvlists",
          "Arrays and kvlists nested four levels deep, in both orders.",
          P + "AnyValue array_value and kvlist_value",
          Ctx(resource=[
              ("a", arr(kvl(("b", arr(s("leaf"), i(7)))), s("x"))),
              ("m", kvl(("n", arr(kvl(("o", d(2.0))))), ("p", EMPTY))),
          ]))
    valid("empty_array_and_kvlist", "An array and a kvlist with no elements.",
          P + "AnyValue array_value and kvlist_value",
          Ctx(resource=[("array", arr()), ("kvlist", kvl())]))
    valid("key_value_without_value",
          "A KeyValue without a value field, one with an empty value, one with an empty key.",
          P + "KeyValue",
          Ctx(resource=[("no_value", None), ("empty_value", EMPTY), ("", s("no key"))]))
    valid("duplicate_keys_kept_in_wire_order",
          "Decoders keep duplicate keys in wire order; choosing among them is the "
          "reader's business.",
          P + "KeyValue",
          Ctx(resource=[("service.name", s("first")), ("x", i(1)),
                        ("service.name", s("second"))],
              attributes=[("k", s("a")), ("k", s("b"))]))
    valid("resource_dropped_attributes_count",
          "Resource.dropped_attributes_count is known upstream and ignored by readers.",
          P + "Resource", Ctx(resource=[("service.name", s("svc"))], resource_dropped=3))
    valid("resource_occurs_twice",
          "Two concatenated ProcessContext messages: the two Resources merge and their "
          "attributes concatenate, as do the extra attributes.",
          P + "Resource occurring twice",
          Ctx(resource=[("service.name", s("svc"))], attributes=[("a", i(1))]),
          Ctx(resource=[("service.version", s("2.0"))], attributes=[("b", i(2))]))
    for message in ["ProcessContext", "Resource", "KeyValue", "AnyValue", "ArrayValue",
                    "KeyValueList"]:
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", message).lower()
        valid(f"unknown_fields_in_{snake}",
              f"An unknown field of each wire type (varint, i64, len, i32) in every "
              f"{message} is skipped.",
              W + "unknown fields",
              Ctx(resource=[("service.name", s("svc")),
                            ("list", arr(s("x"), kvl(("y", i(-3)))))],
                  attributes=[("k", kvl(("z", arr(bo(True)))))],
                  unknown=[message]))

    # --- Valid payloads that text format cannot express --------------------------------
    crafted("unknown_field_before_known_fields",
            "Unknown fields may come before the known ones at any level.",
            W + "unknown fields",
            # ProcessContext { 9: varint 1, attributes { 9: "z", key "k", value {
            #   9: fixed32 0, string_value "v" } } }
            tag(9, 0) + varint(1)
            + ld(2, ld(9, b"z") + ld(1, b"k")
                 + ld(2, tag(9, 5) + bytes(4) + av_string("v"))),
            ctx=Ctx(attributes=[("k", s("v"))]))
    crafted("largest_field_number_unknown",
            "An unknown field with the largest field number, 2^29 - 1, is skipped.",
            W + "unknown fields",
            # tag (2^29 - 1) << 3 | 0 = 0xfffffff8, then varint 1; then attributes { key "k" }
            tag(2**29 - 1, 0) + varint(1) + ld(2, ld(1, b"k")),
            ctx=Ctx(attributes=[("k", None)]))
    crafted("key_value_key_occurs_twice",
            "A scalar field that occurs twice takes its last occurrence.",
            W + "last occurrence of a scalar field wins",
            ld(2, ld(1, b"first") + ld(1, b"second") + ld(2, av_string("v"))),
            ctx=Ctx(attributes=[("second", s("v"))]))
    crafted("any_value_last_oneof_member_wins",
            "When two members of the AnyValue oneof occur, the last one is the value.",
            W + "oneof",
            # AnyValue { string_value "s", int_value 5 }
            ld(2, kv_bytes("k", av_string("s") + tag(3, 0) + varint(5))),
            ctx=Ctx(attributes=[("k", i(5))]))
    crafted("bool_value_nonzero_varint_is_true",
            "A bool_value varint of 2 is true: any non-zero varint is true.",
            W + "varint",
            # attributes { key "k", value { 0x10 (field 2, varint) 0x02 } }
            ld(2, kv_bytes("k", tag(2, 0) + varint(2))),
            ctx=Ctx(attributes=[("k", bo(True))]))
    crafted("non_minimal_varints",
            "Varints with redundant continuation bytes are valid, in lengths and values.",
            W + "varint",
            # attributes, length 13 written as 0x8d 0x00 { key: length 1 written as
            # 0x81 0x80 0x00, "k", value: length 5 as 0x85 0x00 { int_value: 7 written as
            # 0x87 0x80 0x80 0x00 } }
            tag(2, 2) + bytes([0x8D, 0x00])
            + tag(1, 2) + bytes([0x81, 0x80, 0x00]) + b"k"
            + tag(2, 2) + bytes([0x85, 0x00]) + tag(3, 0) + bytes([0x87, 0x80, 0x80, 0x00]),
            ctx=Ctx(attributes=[("k", i(7))]))
    crafted("key_value_value_occurs_twice_merges",
            "KeyValue.value twice: protobuf merges the two AnyValue messages, so a later "
            "empty AnyValue keeps the earlier string.",
            W + "message fields occurring twice merge",
            # KeyValue { key "k", value { string_value "a" }, value { } }
            ld(2, ld(1, b"k") + ld(2, av_string("a")) + ld(2, b"")),
            ctx=Ctx(attributes=[("k", s("a"))]))
    crafted("array_value_occurs_twice_merges",
            "AnyValue.array_value twice: the two ArrayValue messages merge and their "
            "elements concatenate.",
            W + "message fields occurring twice merge",
            # AnyValue { array_value { values { bool true } }, array_value { values { int 5 } } }
            ld(2, kv_bytes("k", ld(5, ld(1, tag(2, 0) + varint(1)))
                           + ld(5, ld(1, tag(3, 0) + varint(5))))),
            ctx=Ctx(attributes=[("k", arr(bo(True), i(5)))]))
    crafted("kvlist_value_occurs_twice_merges",
            "AnyValue.kvlist_value twice: the two KeyValueList messages merge and their "
            "entries concatenate.",
            W + "message fields occurring twice merge",
            ld(2, kv_bytes("k", ld(6, ld(1, kv_bytes("a", av_string("1"))))
                           + ld(6, ld(1, kv_bytes("b", av_string("2")))))),
            ctx=Ctx(attributes=[("k", kvl(("a", s("1")), ("b", s("2"))))]))

    # --- Thread-context reference data -------------------------------------------------
    valid("threadlocal_go_schema_without_key_map",
          "A Go process publishes its schema version and no key map.",
          T + "threadlocal.schema_version",
          Ctx(resource=[("service.name", s("go-svc"))],
              attributes=[(SCHEMA_VERSION_KEY, s("go_pprof_labels_v1"))]))
    valid("threadlocal_tls_v1",
          "The schema version tls_v1, the name tlsdesc_v1_dev takes once OTEP 4947 is "
          "merged, with a key map.",
          T + "threadlocal.schema_version",
          Ctx(resource=[("service.name", s("checkout"))],
              attributes=[(SCHEMA_VERSION_KEY, s("tls_v1")),
                          (ATTRIBUTE_KEY_MAP_KEY, arr(s("http.route"), s("http.method")))]))
    valid("threadlocal_key_map_without_schema_version",
          "A key map without a schema version is still read.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(ATTRIBUTE_KEY_MAP_KEY, arr(s("http.route")))]))
    valid("threadlocal_key_map_empty", "An empty key map: no key index resolves.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(SCHEMA_VERSION_KEY, s("tlsdesc_v1_dev")),
                          (ATTRIBUTE_KEY_MAP_KEY, arr())]))
    valid("threadlocal_key_map_256_names",
          "A key map of 256 names, the most a u8 key index can reach.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(SCHEMA_VERSION_KEY, s("tlsdesc_v1_dev")),
                          (ATTRIBUTE_KEY_MAP_KEY, arr(*[s(f"k{n}") for n in range(256)]))]))
    valid("threadlocal_key_map_257_names",
          "A key map of 257 names is over what a u8 key index can reach.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(SCHEMA_VERSION_KEY, s("tlsdesc_v1_dev")),
                          (ATTRIBUTE_KEY_MAP_KEY, arr(*[s(f"k{n}") for n in range(257)]))]))
    valid("threadlocal_key_map_element_not_string",
          "A key map whose second element is an int.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(ATTRIBUTE_KEY_MAP_KEY, arr(s("http.route"), i(1)))]))
    valid("threadlocal_key_map_not_array", "A key map given as a single string.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(ATTRIBUTE_KEY_MAP_KEY, s("http.route"))]))
    valid("threadlocal_schema_version_not_string", "A schema version given as an int.",
          T + "threadlocal.schema_version",
          Ctx(attributes=[(SCHEMA_VERSION_KEY, i(1))]))
    valid("threadlocal_keys_in_resource_are_not_reference_data",
          "threadlocal.* keys in the Resource (field 1) are ordinary resource attributes.",
          T + "threadlocal keys go in field 2",
          Ctx(resource=[(SCHEMA_VERSION_KEY, s("tlsdesc_v1_dev")),
                        (ATTRIBUTE_KEY_MAP_KEY, arr(s("http.route")))]))
    valid("threadlocal_last_occurrence_wins",
          "With a key map published twice in field 2, the last one is the key map.",
          T + "threadlocal.attribute_key_map",
          Ctx(attributes=[(ATTRIBUTE_KEY_MAP_KEY, arr(s("old"))),
                          (SCHEMA_VERSION_KEY, s("tlsdesc_v1_dev")),
                          (ATTRIBUTE_KEY_MAP_KEY, arr(s("old"), s("new")))]))

    # --- Limits ------------------------------------------------------------------------
    valid("depth_at_default_limit",
          "A value nested 16 levels deep (the attribute's value is level 1) is accepted.",
          L + "max_depth",
          Ctx(attributes=[("deep", nest_arrays(16, s("leaf")))]))
    over = Ctx(attributes=[("deep", nest_arrays(17, s("leaf")))])
    crafted("depth_over_default_limit", "A value nested 17 levels deep is refused.",
            L + "max_depth", protoc_encode(over), error="too_deep")
    valid("depth_at_custom_limit",
          "kvlists nested 3 levels deep with max_depth 3 are accepted.",
          L + "max_depth",
          Ctx(resource=[("m", nest_kvlists(3, s("leaf")))]), limits={"max_depth": 3})
    over = Ctx(resource=[("m", nest_kvlists(4, s("leaf")))])
    crafted("depth_over_custom_limit", "kvlists nested 4 levels deep with max_depth 3.",
            L + "max_depth", protoc_encode(over), error="too_deep",
            limits={"max_depth": 3})
    valid("attributes_at_default_limit",
          "One attribute holding 2047 array elements: 2048 counted, the default limit.",
          L + "max_attributes",
          Ctx(resource=[("many", arr(*[EMPTY] * 2047))]))
    over = Ctx(resource=[("many", arr(*[EMPTY] * 2048))])
    crafted("attributes_over_default_limit",
            "One attribute holding 2048 array elements: 2049 counted.",
            L + "max_attributes", protoc_encode(over), error="too_many_attributes")
    at = Ctx(resource=[("a", i(1)), ("b", kvl(("c", i(2))))], attributes=[("d", arr(i(3)))])
    valid("attributes_at_custom_limit",
          "Two resource attributes, a kvlist entry, an extra attribute and an array "
          "element count 5, at max_attributes 5.",
          L + "max_attributes", at, limits={"max_attributes": 5})
    over = Ctx(resource=[("a", i(1)), ("b", kvl(("c", i(2))))],
               attributes=[("d", arr(i(3), i(4)))])
    crafted("attributes_over_custom_limit", "The same with one more array element: 6 of 5.",
            L + "max_attributes", protoc_encode(over), error="too_many_attributes",
            limits={"max_attributes": 5})
    sized = c_reference_ctx()
    size = len(protoc_encode(sized))
    valid("payload_at_size_limit",
          "A payload exactly as long as max_payload_size is accepted.",
          L + "max_payload_size", sized, limits={"max_payload_size": size})
    crafted("payload_over_size_limit",
            "The same payload with max_payload_size one byte smaller is refused.",
            L + "max_payload_size", protoc_encode(sized), error="payload_too_large",
            limits={"max_payload_size": size - 1})

    # --- Malformed payloads, by hand -----------------------------------------------------
    whole = protoc_encode(c_reference_ctx())
    crafted("truncated_mid_payload",
            "The C-shaped payload cut in half: the Resource's length runs past the end.",
            W + "truncation", whole[: len(whole) // 2], error="truncated")
    crafted("truncated_in_tag",
            "The payload ends inside a two-byte tag (0xa0 starts field 100).",
            W + "truncation", bytes([0xA0]), error="truncated")
    crafted("truncated_in_varint_value",
            "An unknown varint field whose value has a continuation bit on its last byte.",
            W + "truncation", tag(3, 0) + bytes([0x96]), error="truncated")
    crafted("truncated_in_length_prefix",
            "A length-delimited field whose length varint is cut off.",
            W + "truncation", tag(2, 2) + bytes([0x80]), error="truncated")
    crafted("truncated_in_length_delimited_body",
            "attributes declares 5 bytes but only 3 follow.",
            W + "truncation", tag(2, 2) + varint(5) + ld(1, b"k"), error="truncated")
    crafted("truncated_in_double",
            "A double_value with 4 of its 8 bytes at the end of its AnyValue.",
            W + "truncation",
            # attributes { key "k", value { 0x21 (field 4, i64) + 4 bytes } }
            ld(2, ld(1, b"k") + ld(2, tag(4, 1) + bytes(4))), error="truncated")
    crafted("truncated_in_fixed32",
            "An unknown fixed32 field with 2 of its 4 bytes.",
            W + "truncation", tag(3, 5) + bytes(2), error="truncated")
    crafted("truncated_nested_length_past_parent",
            "A key's length runs past the end of its KeyValue though not past the payload.",
            W + "truncation",
            # attributes (3 bytes) { key: len 5, "a" }, then a valid unknown field 3 "bc"
            # whose bytes the key would have swallowed.
            tag(2, 2) + varint(3) + tag(1, 2) + varint(5) + b"a" + ld(3, b"bc"),
            error="truncated")
    crafted("overlong_varint_value",
            "An int_value varint of 11 bytes, over the 10-byte maximum.",
            W + "varint",
            ld(2, kv_bytes("k", tag(3, 0) + bytes([0xFF] * 10) + bytes([0x01]))),
            error="overlong_varint")
    crafted("overlong_varint_tag", "A tag varint of 11 bytes.",
            W + "varint", bytes([0xFF] * 10) + bytes([0x01]), error="overlong_varint")
    crafted("invalid_wire_type_6", "Wire type 6 does not exist.",
            W + "wire types", tag(3, 6), error="invalid_wire_type")
    crafted("invalid_wire_type_7", "Wire type 7 does not exist.",
            W + "wire types", tag(3, 7) + bytes(8), error="invalid_wire_type")
    crafted("invalid_wire_type_6_nested", "Wire type 6 inside a KeyValue.",
            W + "wire types", ld(2, ld(1, b"k") + tag(3, 6)), error="invalid_wire_type")
    crafted("group_start_without_end",
            "A start-group tag (wire type 3) that is never closed.",
            W + "wire types", tag(3, 3), error="invalid_wire_type")
    crafted("group_end_without_start", "An end-group tag (wire type 4) alone.",
            W + "wire types", tag(3, 4), error="invalid_wire_type")
    crafted("field_number_zero", "Field number 0 is never valid.",
            W + "field numbers", tag(0, 2) + varint(0), error="invalid_field_number")
    crafted("field_number_zero_nested", "Field number 0 inside an AnyValue.",
            W + "field numbers", ld(2, kv_bytes("k", tag(0, 0) + varint(1))),
            error="invalid_field_number")
    crafted("tag_over_32_bits",
            "A tag of 2^32 does not fit the 32-bit tag of protobuf.",
            W + "field numbers", varint(2**32) + varint(0), error="invalid_field_number")
    crafted("invalid_utf8_in_key", "A key with the byte 0xff, which is never UTF-8.",
            W + "string fields are UTF-8", ld(2, ld(1, b"k\xff")),
            error="invalid_utf8")
    crafted("invalid_utf8_in_string_value",
            "A string_value with a truncated two-byte sequence (0xc3 0x28).",
            W + "string fields are UTF-8", ld(2, kv_bytes("k", ld(1, b"\xc3\x28"))),
            error="invalid_utf8")
    crafted("invalid_utf8_overlong_encoding",
            "A string_value with the overlong encoding 0xc0 0xaf of '/'.",
            W + "string fields are UTF-8", ld(2, kv_bytes("k", ld(1, b"\xc0\xaf"))),
            error="invalid_utf8")
    crafted("invalid_utf8_surrogate",
            "A string_value with an encoded UTF-16 surrogate (0xed 0xa0 0x80).",
            W + "string fields are UTF-8", ld(2, kv_bytes("k", ld(1, b"\xed\xa0\x80"))),
            error="invalid_utf8")
    crafted("invalid_utf8_in_nested_kvlist_key",
            "A key inside a kvlist inside the Resource that is not UTF-8.",
            W + "string fields are UTF-8",
            ld(1, ld(1, kv_bytes("m", ld(6, ld(1, ld(1, b"\xfe")))))),
            error="invalid_utf8")
    crafted("wrong_wire_type_resource_varint", "ProcessContext.resource sent as a varint.",
            W + "wire type must match the schema", tag(1, 0) + varint(1),
            error="wrong_wire_type")
    crafted("wrong_wire_type_attributes_fixed32",
            "ProcessContext.attributes sent as a fixed32.",
            W + "wire type must match the schema", tag(2, 5) + bytes(4),
            error="wrong_wire_type")
    crafted("wrong_wire_type_resource_attributes_varint",
            "Resource.attributes sent as a varint.",
            W + "wire type must match the schema", ld(1, tag(1, 0) + varint(7)),
            error="wrong_wire_type")
    crafted("wrong_wire_type_key_varint", "KeyValue.key sent as a varint.",
            W + "wire type must match the schema", ld(2, tag(1, 0) + varint(1)),
            error="wrong_wire_type")
    crafted("wrong_wire_type_value_fixed64", "KeyValue.value sent as a fixed64.",
            W + "wire type must match the schema", ld(2, ld(1, b"k") + tag(2, 1) + bytes(8)),
            error="wrong_wire_type")
    crafted("wrong_wire_type_bool_as_len", "AnyValue.bool_value sent length-delimited.",
            W + "wire type must match the schema", ld(2, kv_bytes("k", ld(2, b"\x01"))),
            error="wrong_wire_type")
    crafted("wrong_wire_type_int_as_fixed64", "AnyValue.int_value sent as a fixed64.",
            W + "wire type must match the schema",
            ld(2, kv_bytes("k", tag(3, 1) + bytes(8))), error="wrong_wire_type")
    crafted("wrong_wire_type_double_as_varint", "AnyValue.double_value sent as a varint.",
            W + "wire type must match the schema",
            ld(2, kv_bytes("k", tag(4, 0) + varint(1))), error="wrong_wire_type")
    crafted("wrong_wire_type_string_as_varint", "AnyValue.string_value sent as a varint.",
            W + "wire type must match the schema",
            ld(2, kv_bytes("k", tag(1, 0) + varint(1))), error="wrong_wire_type")
    crafted("wrong_wire_type_array_values_varint", "ArrayValue.values sent as a varint.",
            W + "wire type must match the schema",
            ld(2, kv_bytes("k", ld(5, tag(1, 0) + varint(1)))), error="wrong_wire_type")
    crafted("wrong_wire_type_kvlist_values_fixed32", "KeyValueList.values sent as a fixed32.",
            W + "wire type must match the schema",
            ld(2, kv_bytes("k", ld(6, tag(1, 5) + bytes(4)))), error="wrong_wire_type")
    return v


# ---------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a JSON file is not up to date")
    args = parser.parse_args()
    files = {
        "header.json": header_vectors(),
        "payload.json": payload_vectors(),
        "record.json": record_vectors(),
    }
    stale = []
    for name, vectors in files.items():
        path = HERE / name
        text = dump(vectors)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parent)} ({len(vectors)} vectors)")
    if stale:
        sys.exit(f"out of date: {', '.join(stale)}; run python3 spec-vectors/generate.py")
    if args.check:
        print("spec vectors are up to date")


if __name__ == "__main__":
    main()
