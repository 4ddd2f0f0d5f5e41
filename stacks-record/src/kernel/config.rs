//! What the running kernel's build config says, where it can be read: `/boot/config-RELEASE`
//! or `/proc/config.gz` (CONFIG_IKCONFIG_PROC), as libbpf looks for it. Many containers have
//! neither: callers fall back to what works without it.

use std::io::Read;

/// The kernel's tick rate (`CONFIG_HZ`), or `None` when its config is not readable.
pub(crate) fn tick_hz() -> Option<u32> {
    let text = config_text()?;
    value(&text, "CONFIG_HZ")?.parse().ok().filter(|&hz| hz > 0)
}

/// The text of the running kernel's config.
fn config_text() -> Option<String> {
    let release = kernel_release()?;
    if let Ok(text) = std::fs::read_to_string(format!("/boot/config-{release}")) {
        return Some(text);
    }
    let gz = std::fs::File::open("/proc/config.gz").ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(text.trim().to_string())
}

/// The value of `name` in config `text` (`NAME=value` lines; `# NAME is not set` is none).
fn value<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key == name).then_some(value.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_by_their_whole_name() {
        let text =
            "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=n\n";
        assert_eq!(value(text, "CONFIG_HZ"), Some("250"));
        assert_eq!(value(text, "CONFIG_HZ_250"), Some("y"));
        assert_eq!(value(text, "CONFIG_HZ_100"), None);
    }

    #[test]
    fn this_kernels_tick_rate_is_a_kernel_tick_rate() {
        // Where the config is readable (this machine's has /proc/config.gz), one of the
        // rates Kconfig offers.
        if config_text().is_none() {
            eprintln!("no kernel config readable here: tick_hz() is None");
            return;
        }
        let hz = tick_hz().expect("CONFIG_HZ in a readable kernel config");
        assert!([100, 250, 300, 1000].contains(&hz), "CONFIG_HZ={hz}");
    }
}
