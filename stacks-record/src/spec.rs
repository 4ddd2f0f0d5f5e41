//! The event specification grammar shared by every event: `NAME[:STACKS][:ARG]`, comma-separated.

use std::fmt;

/// Which stacks an event captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackSel {
    User,
    Kernel,
    Both,
}

impl StackSel {
    /// Bit mask understood by the BPF side (`STACKS_WANT_*`).
    pub fn mask(self) -> u32 {
        match self {
            StackSel::User => 1,
            StackSel::Kernel => 2,
            StackSel::Both => 3,
        }
    }

    pub fn user(self) -> bool {
        self != StackSel::Kernel
    }

    pub fn kernel(self) -> bool {
        self != StackSel::User
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "u" => Some(StackSel::User),
            "k" => Some(StackSel::Kernel),
            "uk" | "ku" => Some(StackSel::Both),
            _ => None,
        }
    }
}

impl fmt::Display for StackSel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StackSel::User => "u",
            StackSel::Kernel => "k",
            StackSel::Both => "uk",
        })
    }
}

/// `profile[:STACKS][:HZ]`: CPU samples from the cpu-clock perf event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub stacks: StackSel,
    pub hz: u32,
}

impl Profile {
    pub const DEFAULT_HZ: u32 = 99;
    pub const MAX_HZ: u32 = 10_000;

    /// The sampling period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.hz)
    }
}

/// A parsed `-e` specification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSpec {
    pub profile: Option<Profile>,
}

/// The specification used when `-e` is not given.
pub const DEFAULT_SPEC: &str = "profile:uk:99";

/// Event names this build can record.
pub const EVENT_NAMES: &[&str] = &["profile"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("empty event specification")]
    Empty,
    #[error("empty event in `{0}` (a stray comma?)")]
    EmptyToken(String),
    #[error("unknown event `{name}` in `{token}` (available: {available})")]
    UnknownEvent {
        name: String,
        token: String,
        available: String,
    },
    #[error("bad stack selection `{value}` in `{token}`: use u, k or uk")]
    BadStacks { value: String, token: String },
    #[error("bad rate `{value}` in `{token}`: a sampling frequency in Hz from 1 to {max}")]
    BadRate {
        value: String,
        token: String,
        max: u32,
    },
    #[error("too many fields in `{0}`: expected NAME[:STACKS][:ARG]")]
    TooManyFields(String),
    #[error("event `{0}` given twice")]
    Duplicate(String),
}

impl EventSpec {
    /// Parse a comma-separated list of `NAME[:STACKS][:ARG]`.
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(SpecError::Empty);
        }
        let mut out = EventSpec::default();
        for token in spec.split(',') {
            let token = token.trim();
            if token.is_empty() {
                return Err(SpecError::EmptyToken(spec.to_string()));
            }
            let fields: Vec<&str> = token.split(':').collect();
            match fields[0] {
                "profile" => {
                    if out.profile.is_some() {
                        return Err(SpecError::Duplicate("profile".into()));
                    }
                    out.profile = Some(parse_profile(token, &fields[1..])?);
                }
                name => {
                    return Err(SpecError::UnknownEvent {
                        name: name.to_string(),
                        token: token.to_string(),
                        available: EVENT_NAMES.join(", "),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The normalized text form, e.g. `profile:uk:99`: stored in the stream metadata.
    pub fn normalized(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.profile {
            parts.push(format!("profile:{}:{}", p.stacks, p.hz));
        }
        parts.join(",")
    }
}

fn parse_profile(token: &str, rest: &[&str]) -> Result<Profile, SpecError> {
    let mut p = Profile {
        stacks: StackSel::Both,
        hz: Profile::DEFAULT_HZ,
    };
    let (stacks, arg) = match rest {
        [] => (None, None),
        // A lone numeric field is the rate: `profile:49`.
        [x] if x.chars().next().is_some_and(|c| c.is_ascii_digit()) => (None, Some(*x)),
        [s] => (Some(*s), None),
        [s, a] => (Some(*s), Some(*a)),
        _ => return Err(SpecError::TooManyFields(token.to_string())),
    };
    if let Some(s) = stacks {
        p.stacks = StackSel::parse(s).ok_or_else(|| SpecError::BadStacks {
            value: s.to_string(),
            token: token.to_string(),
        })?;
    }
    if let Some(a) = arg {
        p.hz = a
            .parse::<u32>()
            .ok()
            .filter(|hz| (1..=Profile::MAX_HZ).contains(hz))
            .ok_or_else(|| SpecError::BadRate {
                value: a.to_string(),
                token: token.to_string(),
                max: Profile::MAX_HZ,
            })?;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(spec: &str) -> Profile {
        EventSpec::parse(spec).unwrap().profile.unwrap()
    }

    #[test]
    fn defaults_and_forms() {
        assert_eq!(
            profile("profile"),
            Profile {
                stacks: StackSel::Both,
                hz: 99
            }
        );
        assert_eq!(profile("profile:u").stacks, StackSel::User);
        assert_eq!(profile("profile:ku").stacks, StackSel::Both);
        assert_eq!(profile("profile:k:49").hz, 49);
        assert_eq!(profile("profile:199").hz, 199);
        assert_eq!(profile(" profile:u:99 ").stacks, StackSel::User);
        assert_eq!(
            EventSpec::parse(DEFAULT_SPEC).unwrap().normalized(),
            "profile:uk:99"
        );
        assert_eq!(profile("profile:u:1000").period_ns(), 1_000_000);
    }

    #[test]
    fn errors_name_the_token() {
        let e = EventSpec::parse("profile:x:99").unwrap_err();
        assert!(e.to_string().contains("`x`") && e.to_string().contains("profile:x:99"));
        let e = EventSpec::parse("profile:u:0").unwrap_err();
        assert!(matches!(e, SpecError::BadRate { .. }), "{e}");
        let e = EventSpec::parse("profile:u:fast").unwrap_err();
        assert!(e.to_string().contains("`fast`"), "{e}");
        let e = EventSpec::parse("profile:u:100000").unwrap_err();
        assert!(matches!(e, SpecError::BadRate { .. }));
        let e = EventSpec::parse("profil:u").unwrap_err();
        assert!(e.to_string().contains("`profil`"), "{e}");
        assert_eq!(
            EventSpec::parse("profile,profile:u").unwrap_err(),
            SpecError::Duplicate("profile".into())
        );
        assert!(matches!(
            EventSpec::parse("profile:u:9:9").unwrap_err(),
            SpecError::TooManyFields(_)
        ));
        assert!(matches!(
            EventSpec::parse("profile,").unwrap_err(),
            SpecError::EmptyToken(_)
        ));
        assert_eq!(EventSpec::parse("").unwrap_err(), SpecError::Empty);
    }
}
