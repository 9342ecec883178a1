//! The subcommands of `otel-ctx` and their output.

use std::time::Duration;

pub mod demo;
pub mod json;
pub mod ps;
pub mod show;
pub mod text;

/// Parses `10s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(arg: &str) -> Result<Duration, String> {
    let arg = arg.trim();
    let split = arg
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(arg.len());
    let (number, unit) = arg.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{arg:?} is not a duration such as 10s, 500ms or 2m"))?;
    let seconds = match unit {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {arg:?}: use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{arg:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("").is_err());
    }
}
