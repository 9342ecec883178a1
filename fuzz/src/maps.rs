//! `maps_line`: `/proc/<pid>/maps` lines and the streaming [`MapsScanner`], fed through
//! a reader that returns fuzzer-chosen chunk sizes.
//!
//! Input layout:
//!
//! | byte | meaning |
//! |---|---|
//! | 0 | stop after this many lines (0: read to the end) |
//! | 1 | `r`: the text is repeated `1 + r % 16` times, so lines longer than the scanner's buffer occur |
//! | 2 | `n`: the number of chunk codes that follow, `n % 16` |
//! | 3.. | chunk codes: `0` makes a read fail with `Interrupted` (once in a row), `c` reads at most `1 + c * c / 4` bytes; they are used in turn |
//! | rest | the text |
//!
//! Checked: the scanner hands out exactly the lines a plain split gives (less those
//! too long for its buffer, and a last empty one), whatever the chunking, and stops
//! when asked; [`MapsScanner::find_context_mappings`] finds what parsing every line
//! finds, keeping exact names ahead of names that only start with one when it has to
//! choose; every line that [`MapsLine::parse`] accepts gives the same fields when printed
//! again and parsed back; exact mapping names print as the bytes they were parsed from.

use std::io::{self, Read};
use std::ops::ControlFlow;

use otel_ctx_reader::maps::{ContextMapping, MappingName};
use otel_ctx_reader::maps::{MapsLine, MapsScanner, MAX_CANDIDATES, SCAN_BUFFER_SIZE};

/// Lines per input that get every check of [`check_line`].
const MAX_CHECKED_LINES: usize = 64;

/// A reader over `data` whose reads return at most the sizes the chunk codes give.
struct Chunked<'a> {
    data: &'a [u8],
    codes: &'a [u8],
    next: usize,
    interrupted: bool,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let code = match self.codes {
            [] => None,
            codes => {
                let code = codes[self.next % codes.len()];
                self.next += 1;
                Some(code)
            }
        };
        // One interruption at a time: a reader that is always interrupted never ends.
        if code == Some(0) && !self.interrupted {
            self.interrupted = true;
            return Err(io::ErrorKind::Interrupted.into());
        }
        self.interrupted = false;
        let limit = code.map_or(usize::MAX, |c| 1 + usize::from(c) * usize::from(c) / 4);
        let n = limit.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// The lines the scanner must hand out: every newline-separated piece, less a last
/// empty one (the text ended with a newline) and less those that cannot fit its buffer.
fn expected_lines(text: &[u8]) -> Vec<&[u8]> {
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.retain(|l| l.len() < SCAN_BUFFER_SIZE);
    lines
}

/// Splits the input and checks everything described in the module docs.
pub fn check(input: &[u8]) {
    let [stop, reps, n, rest @ ..] = input else {
        return;
    };
    let (codes, text) = rest.split_at((usize::from(*n) % 16).min(rest.len()));
    let text = text.repeat(1 + usize::from(*reps) % 16);
    let expected = expected_lines(&text);
    let reader = || Chunked {
        data: &text,
        codes,
        next: 0,
        interrupted: false,
    };

    let mut scanner = MapsScanner::new();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let stop = usize::from(*stop);
    scanner
        .for_each_line(reader(), |line| {
            lines.push(line.to_vec());
            if lines.len() == stop {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .expect("the reader fails only with Interrupted, which the scanner retries");
    let wanted = if stop == 0 {
        &expected[..]
    } else {
        &expected[..stop.min(expected.len())]
    };
    assert!(
        lines.iter().map(Vec::as_slice).eq(wanted.iter().copied()),
        "scanner lines differ from a plain split"
    );

    // The scanner is reused, as a reader does between scans.
    let found = scanner
        .find_context_mappings(reader())
        .expect("the reader fails only with Interrupted, which the scanner retries");
    // Every line is parsed; the first ones are also printed and parsed back, which
    // costs allocations that would slow long inputs down.
    let mut model: Vec<ContextMapping> = Vec::new();
    for (i, line) in expected.iter().enumerate() {
        let mapping = if i < MAX_CHECKED_LINES {
            check_line(line)
        } else {
            MapsLine::parse(line).and_then(|l| l.context_mapping())
        };
        let Some(mapping) = mapping else { continue };
        if model.len() < MAX_CANDIDATES {
            model.push(mapping);
        } else if mapping.name.exact {
            // Full: an exact name takes the place of the last one that is not; with
            // only exact names kept, the scan is over.
            let Some(at) = model.iter().rposition(|m| !m.name.exact) else {
                break;
            };
            model.remove(at);
            model.push(mapping);
        }
    }
    assert_eq!(found, model);

    if !text.contains(&b'\n') {
        check_line(&text);
    }
    check_name(&text);
}

/// Checks one line (without a newline) and returns the context mapping it describes.
fn check_line(line: &[u8]) -> Option<ContextMapping> {
    let parsed = MapsLine::parse(line)?;
    // The name is the end of the line.
    let name_at = line.len() - parsed.name.len();
    assert!(std::ptr::eq(parsed.name, &line[name_at..]));
    assert!(!parsed.name.starts_with(b" "));

    let mut again = format!("{:x}-{:x} ", parsed.start, parsed.end).into_bytes();
    again.extend_from_slice(&parsed.perms);
    again.extend_from_slice(format!(" {:x} 00:00 {} ", parsed.offset, parsed.inode).as_bytes());
    again.extend_from_slice(parsed.name);
    let reparsed = MapsLine::parse(&again).expect("a printed line parses");
    assert_eq!(
        (
            reparsed.start,
            reparsed.end,
            reparsed.perms,
            reparsed.offset,
            reparsed.inode,
            reparsed.name
        ),
        (
            parsed.start,
            parsed.end,
            parsed.perms,
            parsed.offset,
            parsed.inode,
            parsed.name
        )
    );
    let mut with_newline = line.to_vec();
    with_newline.push(b'\n');
    assert_eq!(MapsLine::parse(&with_newline), Some(parsed));

    let mapping = parsed.context_mapping();
    match mapping {
        Some(m) => {
            assert!(!parsed.is_executable());
            assert_eq!((m.start, m.end), (parsed.start, parsed.end));
            assert_eq!(MappingName::parse(parsed.name), Some(m.name));
            assert_eq!(m.len(), m.end.saturating_sub(m.start));
            if m.name.exact {
                assert_eq!(m.name.to_string().as_bytes(), parsed.name);
            }
        }
        None => assert!(parsed.is_executable() || MappingName::parse(parsed.name).is_none()),
    }
    mapping
}

fn check_name(text: &[u8]) {
    if let Some(name) = MappingName::parse(text) {
        let kind = name.kind.name().as_bytes();
        assert!(text.starts_with(kind));
        assert_eq!(name.deleted, text.ends_with(b" (deleted)"));
        assert_eq!(
            name.exact,
            text.len() == kind.len() || &text[kind.len()..] == b" (deleted)"
        );
        if name.exact {
            assert_eq!(name.to_string().as_bytes(), text);
        }
    }
}
