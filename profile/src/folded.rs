//! The folded stacks of flamegraph.pl (`root;caller;...;leaf count`), and the SVG flame
//! graph inferno draws from them. The root frame is the value of a chosen attribute.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::profile::{Profile, OVERFLOW_FUNCTION};

/// How folded stacks and flame graphs group samples.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldedOptions {
    /// The label whose value is the root frame (`(no context)` for samples without a
    /// thread context, `(no <by>)` for a context without it); `None` for no root
    /// frame. Default `http.route`.
    pub by: Option<String>,
}

impl Default for FoldedOptions {
    fn default() -> Self {
        Self {
            by: Some("http.route".to_owned()),
        }
    }
}

impl FoldedOptions {
    /// Sets [`by`](Self::by).
    #[must_use]
    pub fn with_by(mut self, by: Option<impl Into<String>>) -> Self {
        self.by = by.map(Into::into);
        self
    }
}

/// `name` as one frame of a folded line: no `;` (the separator), no line breaks or
/// other control characters, not empty.
fn frame(name: &str) -> Cow<'_, str> {
    if name.is_empty() {
        return Cow::Borrowed("(empty)");
    }
    if !name.chars().any(|c| c == ';' || c.is_control()) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .map(|c| match c {
                ';' => ':',
                c if c.is_control() => '?',
                c => c,
            })
            .collect(),
    )
}

impl Profile {
    /// The folded stacks, root first, each with its sample count; equal lines merged,
    /// in sorted order.
    pub fn folded(&self, options: &FoldedOptions) -> BTreeMap<String, u64> {
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        let mut line = String::new();
        for entry in &self.entries {
            line.clear();
            if let Some(by) = &options.by {
                let group = self
                    .label_sets
                    .get(entry.labels)
                    .map_or(Cow::Borrowed("(no context)"), |l| l.group(by));
                line.push_str(&frame(&group));
            }
            let mut push = |name: &str| {
                if !line.is_empty() {
                    line.push(';');
                }
                line.push_str(&frame(name));
            };
            match entry.stack.and_then(|s| self.stacks.get(s)) {
                Some(stack) => {
                    for &at in stack.iter().rev() {
                        if let Some(location) = self.locations.get(at) {
                            for name in location.frame_names().iter().rev() {
                                push(name);
                            }
                        }
                    }
                }
                None => push(OVERFLOW_FUNCTION),
            }
            if line.is_empty() {
                line.push_str("(empty)");
            }
            *lines.entry(line.clone()).or_default() += entry.samples;
        }
        lines
    }

    /// Writes the folded stacks, one `frames count` line each.
    pub fn write_folded(&self, options: &FoldedOptions, mut out: impl Write) -> io::Result<()> {
        for (line, count) in self.folded(options) {
            writeln!(out, "{line} {count}")?;
        }
        Ok(())
    }

    /// The flame graph's title: the service, the duration and the sample count.
    pub fn title(&self) -> String {
        let service = match &self.service_name {
            Some(name) => name.clone(),
            None => format!("process {}", self.pid),
        };
        let samples: u64 = self.entries.iter().map(|e| e.samples).sum();
        format!(
            "{service}: {:.1} s, {samples} samples",
            self.duration.as_secs_f64()
        )
    }

    /// Writes an SVG flame graph of the folded stacks (inferno's), titled with
    /// [`title`](Self::title).
    pub fn write_svg(&self, options: &FoldedOptions, out: impl Write) -> io::Result<()> {
        let lines: Vec<String> = self
            .folded(options)
            .into_iter()
            .map(|(line, count)| format!("{line} {count}"))
            .collect();
        let mut svg = inferno::flamegraph::Options::default();
        svg.title = self.title();
        if let Some(by) = &options.by {
            svg.subtitle = Some(format!("root frames: {by}"));
        }
        svg.count_name = "samples".to_owned();
        if lines.is_empty() {
            // inferno refuses an empty input; an empty profile is still a profile.
            return write_empty_svg(&svg.title, out);
        }
        inferno::flamegraph::from_lines(&mut svg, lines.iter().map(String::as_str), out)
            .map_err(io::Error::other)
    }
}

/// An SVG that says there is nothing to draw.
fn write_empty_svg(title: &str, mut out: impl Write) -> io::Result<()> {
    let escaped = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    write!(
        out,
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\">\
         <text x=\"600\" y=\"24\" text-anchor=\"middle\">{escaped}</text>\
         <text x=\"600\" y=\"48\" text-anchor=\"middle\">no samples</text></svg>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::example;

    #[test]
    fn folded_lines_root_first_with_counts() {
        let mut out = Vec::new();
        example()
            .write_folded(&FoldedOptions::default(), &mut out)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "(no context);[overflow: past the profile's limits] 4\n\
             (no context);[unknown] 0x7fff0000;[unknown] libx.so+0x300 2\n\
             (no http.route);main:<b>;outer_fn (a.c:10);inlined_fn (a.c:3) 1\n\
             /cart;main:<b>;outer_fn (a.c:10);inlined_fn (a.c:3) 3\n"
        );
        let bare = example().folded(&FoldedOptions::default().with_by(None::<String>));
        assert_eq!(
            bare.get("main:<b>;outer_fn (a.c:10);inlined_fn (a.c:3)"),
            Some(&4),
            "{bare:?}"
        );
    }

    #[test]
    fn frames_never_break_the_format() {
        assert_eq!(frame("a;b\nc"), "a:b?c");
        assert_eq!(frame(""), "(empty)");
        assert!(matches!(frame("plain"), Cow::Borrowed("plain")));
    }

    #[test]
    fn svg_is_xml_and_escapes_what_it_shows() {
        let profile = example();
        let mut out = Vec::new();
        profile
            .write_svg(&FoldedOptions::default(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        let doc = roxmltree::Document::parse_with_options(&text, options).unwrap();
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(
            texts
                .iter()
                .any(|t| t.contains("checkout <&> \"svc\": 2.5 s, 10 samples")),
            "{texts:?}"
        );
        let titles: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("title"))
            .filter_map(|n| n.text())
            .collect();
        for name in ["/cart", "main:<b>", "inlined_fn (a.c:3)", "(no context)"] {
            assert!(
                titles.iter().any(|t| t.starts_with(name)),
                "{name} not in {titles:?}"
            );
        }
        let mut empty = example();
        empty.entries.clear();
        let mut out = Vec::new();
        empty
            .write_svg(&FoldedOptions::default(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        roxmltree::Document::parse(&text).unwrap();
        assert!(text.contains("no samples"));
    }
}
