//! The one reader of `/proc/PID/maps`: each line as a [`Mapping`], the path being everything
//! after the inode field (so a path with spaces survives whole).

use std::ops::Range;

/// One line of a `/proc/PID/maps` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mapping<'a> {
    /// Virtual addresses.
    pub(crate) range: Range<u64>,
    /// `r-xp` and the like.
    pub(crate) perms: &'a str,
    /// Offset in the file of the range's start.
    pub(crate) offset: u64,
    /// `major:minor` of the file's device.
    pub(crate) dev: &'a str,
    /// The file's inode; 0 for anonymous memory, the stack, the vdso.
    pub(crate) inode: u64,
    /// The file's path, `[vdso]`, `[stack]`…, or empty for anonymous memory.
    pub(crate) path: &'a str,
}

impl Mapping<'_> {
    /// Whether the range is executable.
    pub(crate) fn executable(&self) -> bool {
        self.perms.contains('x')
    }
}

/// The `/proc/PID/maps` text of process `pid`.
pub(crate) fn read(pid: u32) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
}

/// Every well-formed line of a `/proc/PID/maps` text (others are skipped).
pub(crate) fn parse(text: &str) -> impl Iterator<Item = Mapping<'_>> {
    text.lines().filter_map(parse_line)
}

/// One line: `START-END PERMS OFFSET DEV INODE [PATH]`.
pub(crate) fn parse_line(line: &str) -> Option<Mapping<'_>> {
    let mut rest = line;
    let range = field(&mut rest)?;
    let perms = field(&mut rest)?;
    let offset = field(&mut rest)?;
    let dev = field(&mut rest)?;
    let inode = field(&mut rest)?;
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        range: u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev,
        inode: inode.parse().ok()?,
        path: rest.trim_start_matches([' ', '\t']),
    })
}

/// The next space-separated field of `rest`, which is left after it.
fn field<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let s = rest.trim_start_matches(' ');
    let end = s.find(' ').unwrap_or(s.len());
    let (f, tail) = s.split_at(end);
    *rest = tail;
    (!f.is_empty()).then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0-55e0 r--p 00000000 fe:00 123                        /usr/bin/app
55e0-55f0 r-xp 00001000 fe:00 123                        /usr/bin/app
7f20-7f30 rw-p 00000000 00:00 0 
7ff0-7fff r-xp 00000000 00:00 0                          [vdso]
7f40-7f50 r-xp 00002000 fe:00 789                        /tmp/with  two spaces.so (deleted)
bad line
";

    #[test]
    fn fields_and_paths_with_spaces() {
        let m: Vec<Mapping<'_>> = parse(MAPS).collect();
        assert_eq!(m.len(), 5, "the malformed line is skipped");
        assert_eq!(
            m[1],
            Mapping {
                range: 0x55e0..0x55f0,
                perms: "r-xp",
                offset: 0x1000,
                dev: "fe:00",
                inode: 123,
                path: "/usr/bin/app",
            }
        );
        assert!(m[1].executable() && !m[0].executable());
        assert_eq!((m[2].path, m[2].inode), ("", 0));
        assert_eq!((m[3].path, m[3].inode), ("[vdso]", 0));
        assert_eq!(m[4].path, "/tmp/with  two spaces.so (deleted)");
        assert_eq!(m[4].offset, 0x2000);
    }

    #[test]
    fn own_maps() {
        let text = read(std::process::id()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(parse(&text).any(|m| m.executable() && m.path == exe.to_str().unwrap()));
    }
}
