//! How numbers read on the screen: durations, bytes, rates, times of day, histograms and bars.

use crate::view::{BUCKETS, Ns};

/// `1.5s`, `20ms`, `3.2µs`, `800ns`.
pub fn duration(ns: Ns) -> String {
    let ns = ns.max(0) as f64;
    let (v, unit) = if ns >= 3_600e9 {
        (ns / 3_600e9, "h")
    } else if ns >= 60e9 {
        (ns / 60e9, "m")
    } else if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        return format!("{ns:.0}ns");
    };
    if v >= 100.0 || (v - v.round()).abs() < 0.05 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// `512B`, `1.5K`, `20M`, `3.1G` (powers of 1024).
pub fn bytes(b: f64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = b.max(0.0);
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || v >= 100.0 || (v - v.round()).abs() < 0.05 {
        format!("{v:.0}{}", units[i])
    } else {
        format!("{v:.1}{}", units[i])
    }
}

/// `12,345`.
pub fn count(n: i64) -> String {
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A UTC time of day with ms, `12:35:32.125`; with the date when `date` is set.
pub fn time(ns: Ns, date: bool) -> String {
    let t = chrono::DateTime::from_timestamp_nanos(ns);
    if date {
        t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
    } else {
        t.format("%H:%M:%S%.3f").to_string()
    }
}

const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// One character per latency bucket, its height relative to the row's fullest bucket; an
/// empty bucket is a space.
pub fn histogram(counts: &[i64; BUCKETS]) -> String {
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    counts
        .iter()
        .map(|&c| {
            if c <= 0 {
                ' '
            } else {
                let i = ((c as f64 / top) * (LEVELS.len() - 1) as f64).round() as usize;
                LEVELS[i.min(LEVELS.len() - 1)]
            }
        })
        .collect()
}

/// The histogram's header, aligned to its buckets: `<1µs`, `1ms` (bucket 11) and `≥1s`.
pub(crate) fn histogram_header() -> String {
    let mut h: Vec<char> = vec!['_'; BUCKETS];
    let mut put = |at: usize, text: &str| {
        for (i, c) in text.chars().enumerate() {
            if at + i < BUCKETS {
                h[at + i] = c;
            }
        }
    };
    put(0, "<1µs");
    put(10, "1ms");
    put(BUCKETS - 3, "≥1s");
    h.into_iter().collect()
}

/// A bar of `width` cells for `frac` of the whole, in eighths.
pub fn bar(frac: f64, width: usize) -> String {
    let eighths = (frac.clamp(0.0, 1.0) * (width * 8) as f64).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    const PART: [&str; 8] = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"];
    s.push_str(PART[eighths % 8]);
    s
}

/// `text` cut to `width` characters, `…` marking the cut.
pub fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut s: String = text.chars().take(width - 1).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_at_a_glance() {
        assert_eq!(duration(1_500_000_000), "1.5s");
        assert_eq!(duration(20_000_000), "20ms");
        assert_eq!(duration(800), "800ns");
        assert_eq!(bytes(1536.0), "1.5K");
        assert_eq!(bytes(16.0 * 1024.0 * 1024.0), "16M");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(bar(0.5, 4), "██");
    }

    #[test]
    fn histograms_scale_to_their_fullest_bucket() {
        let mut c = [0i64; BUCKETS];
        c[0] = 10;
        c[5] = 5;
        let h = histogram(&c);
        assert_eq!(h.chars().count(), BUCKETS);
        assert_eq!(h.chars().next(), Some('█'));
        assert_eq!(h.chars().nth(1), Some(' '));
        assert_eq!(histogram_header().chars().count(), BUCKETS);
    }
}
