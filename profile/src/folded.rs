//! The folded stacks of flamegraph.pl (`root;caller;...;leaf count`), and the SVG flame
//! graph inferno draws from them. The root frame is the value of a chosen attribute.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::profile::{Entry, Profile, OVERFLOW_FUNCTION};

/// How folded stacks and flame graphs group samples.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldedOptions {
    /// The label whose value is the root frame (`(no context)` for samples without a
    /// thread context, `(no <by>)` for a context without it); `None` for no root
    /// frame. Default `http.route`.
    pub by: Option<String>,
    /// The time shown, in a profile of off-CPU time too. Default [`Show::Cpu`].
    pub show: Show,
}

/// The time a flame graph shows. In a profile that measured off-CPU time
/// ([`Profile::off_cpu`]), each line's value is microseconds of that time; in a CPU
/// profile, it is the samples, which stand for CPU time ([`Show::OffCpu`] shows none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Show {
    /// Time on a CPU.
    #[default]
    Cpu,
    /// Time off a CPU: sleeping, blocked, or waiting for one.
    OffCpu,
    /// Both: the wall-clock time of the threads.
    Wall,
}

impl Show {
    /// Every view, in the order `--show` lists them.
    pub const ALL: [Self; 3] = [Self::Cpu, Self::OffCpu, Self::Wall];

    /// `cpu`, `off-cpu` or `wall`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::OffCpu => "off-cpu",
            Self::Wall => "wall",
        }
    }

    /// What the view shows, in a few words.
    pub const fn description(self) -> &'static str {
        match self {
            Self::Cpu => "time on a CPU",
            Self::OffCpu => "time off a CPU (sleeping, blocked, waiting for one)",
            Self::Wall => "wall-clock time: on and off a CPU",
        }
    }

    /// The value of `entry` in this view of `profile`.
    fn value(self, profile: &Profile, entry: &Entry) -> u64 {
        let micros = |ns: u64| ns / 1_000;
        match (profile.off_cpu, self) {
            (false, Self::OffCpu) => 0,
            (false, _) => entry.samples,
            (true, Self::Cpu) => micros(entry.nanos),
            (true, Self::OffCpu) => micros(entry.off_cpu_nanos),
            (true, Self::Wall) => micros(entry.nanos.saturating_add(entry.off_cpu_nanos)),
        }
    }
}

impl std::str::FromStr for Show {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| format!("{name}: show cpu, off-cpu or wall"))
    }
}

impl Default for FoldedOptions {
    fn default() -> Self {
        Self {
            by: Some("http.route".to_owned()),
            show: Show::Cpu,
        }
    }
}

impl FoldedOptions {
    /// Sets [`show`](Self::show).
    #[must_use]
    pub const fn with_show(mut self, show: Show) -> Self {
        self.show = show;
        self
    }

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
    /// The folded stacks, root first, each with its value in the view
    /// [`FoldedOptions::show`] asks for (a sample count, or microseconds: see [`Show`]);
    /// equal lines merged, lines of no value left out, in sorted order.
    pub fn folded(&self, options: &FoldedOptions) -> BTreeMap<String, u64> {
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        let mut line = String::new();
        for entry in &self.entries {
            let value = options.show.value(self, entry);
            if value == 0 {
                continue;
            }
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
            *lines.entry(line.clone()).or_default() += value;
        }
        lines
    }

    /// The time on and off a CPU of each group of samples by label `by` (as the
    /// flame graph's roots, [`LabelSet::group`](crate::LabelSet::group)), in
    /// nanoseconds: `(group, on a CPU, off a CPU)`, the most wall-clock time first.
    pub fn time_by(&self, by: &str) -> Vec<(String, u64, u64)> {
        let mut groups: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for entry in &self.entries {
            let group = self
                .label_sets
                .get(entry.labels)
                .map_or(Cow::Borrowed("(no context)"), |l| l.group(by));
            let times = groups.entry(group.into_owned()).or_default();
            times.0 = times.0.saturating_add(entry.nanos);
            times.1 = times.1.saturating_add(entry.off_cpu_nanos);
        }
        let mut all: Vec<(String, u64, u64)> = groups
            .into_iter()
            .map(|(group, (on, off))| (group, on, off))
            .collect();
        all.sort_by_key(|(_, on, off)| std::cmp::Reverse(on.saturating_add(*off)));
        all
    }

    /// Writes the folded stacks, one `frames count` line each.
    pub fn write_folded(&self, options: &FoldedOptions, mut out: impl Write) -> io::Result<()> {
        for (line, count) in self.folded(options) {
            writeln!(out, "{line} {count}")?;
        }
        Ok(())
    }

    /// The flame graph's title: the service, the duration and the sample count (and the
    /// view, in a profile of off-CPU time too).
    pub fn title(&self) -> String {
        self.title_of(Show::Cpu)
    }

    fn title_of(&self, show: Show) -> String {
        let service = match &self.service_name {
            Some(name) => name.clone(),
            None => format!("process {}", self.pid),
        };
        let samples: u64 = self.entries.iter().map(|e| e.samples).sum();
        let view = match self.off_cpu {
            true => format!(", {}", show.description()),
            false => String::new(),
        };
        format!(
            "{service}: {:.1} s, {samples} samples{view}",
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
        svg.title = self.title_of(options.show);
        if let Some(by) = &options.by {
            svg.subtitle = Some(format!("root frames: {by}"));
        }
        svg.count_name = match self.off_cpu {
            true => "microseconds".to_owned(),
            false => "samples".to_owned(),
        };
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
    fn each_view_shows_its_time() {
        let mut profile = example();
        // A CPU profile: samples, whatever the view; no off-CPU time.
        let show = |p: &Profile, show: Show| p.folded(&FoldedOptions::default().with_show(show));
        assert_eq!(show(&profile, Show::Wall), show(&profile, Show::Cpu));
        assert!(show(&profile, Show::OffCpu).is_empty());
        profile.off_cpu = true;
        profile.entries[0].off_cpu_nanos = 5_000_000;
        profile.entries[1].nanos = 0;
        profile.entries[1].off_cpu_nanos = 2_000_000;
        let cart = "/cart;main:<b>;outer_fn (a.c:10);inlined_fn (a.c:3)";
        let unknown = "(no context);[unknown] 0x7fff0000;[unknown] libx.so+0x300";
        // Microseconds; a line with none of the view's time is left out.
        let cpu = show(&profile, Show::Cpu);
        assert_eq!(cpu.get(cart), Some(&30_000));
        assert_eq!(cpu.get(unknown), None);
        let off = show(&profile, Show::OffCpu);
        assert_eq!(
            (off.get(cart), off.get(unknown), off.len()),
            (Some(&5_000), Some(&2_000), 2)
        );
        assert_eq!(show(&profile, Show::Wall).get(cart), Some(&35_000));
        assert!(profile
            .title_of(Show::OffCpu)
            .ends_with("time off a CPU (sleeping, blocked, waiting for one)"));
        assert_eq!("off-cpu".parse::<Show>(), Ok(Show::OffCpu));
        assert!("idle".parse::<Show>().is_err());
        let by_route = profile.time_by("http.route");
        assert_eq!(
            by_route[0],
            ("(no context)".to_owned(), 40_000_000, 2_000_000)
        );
        assert_eq!(by_route[1], ("/cart".to_owned(), 30_000_000, 5_000_000));
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
