//! Command-line quantities: sizes (`64M`, `1G`, `4096`) and durations (`500ms`, `30s`, `10m`,
//! `1h`).

use std::time::Duration;

pub use stacks_stream::cli::parse_size;

/// A positive duration: a number followed by ms, s, m or h.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 30s, 10m, 1h)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" | "min" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "`{text}`: give a unit: ms, s, m or h (e.g. 30s, 10m)"
            ));
        }
    };
    if d.is_zero() {
        return Err("the duration must be more than 0".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert!(parse_size("0").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("5X").unwrap_err().contains("unit"));
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
