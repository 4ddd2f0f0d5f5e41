//! The probe forms of `-e`: `tp:CATEGORY:NAME`, `uprobe:PATH:SYMBOL`, `uretprobe:PATH:SYMBOL`
//! and `usdt:PATH:PROVIDER:NAME`, each followed by `[:STACKS][:count]`.

use crate::kinds::{PROBE_FORMS, ProbeForm};

use crate::events::{SpecError, StackSel};

/// Probes one recording takes at most (`STACKS_MAX_PROBES`).
pub const MAX_PROBES: usize = 64;

/// What a probe attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeType {
    Tp,
    Uprobe,
    Uretprobe,
    Usdt,
}

impl ProbeType {
    pub const ALL: [ProbeType; 4] = [Self::Tp, Self::Uprobe, Self::Uretprobe, Self::Usdt];

    fn from_prefix(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.prefix() == s)
    }

    /// The spec's first field.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Tp => "tp",
            Self::Uprobe => "uprobe",
            Self::Uretprobe => "uretprobe",
            Self::Usdt => "usdt",
        }
    }

    /// Its entry in the registry's probe forms: the fields naming it and its default stacks.
    fn form(self) -> &'static ProbeForm {
        PROBE_FORMS
            .iter()
            .find(|f| f.prefix == self.prefix())
            .expect("every probe type is a registered probe form")
    }

    /// The fields naming the probe, as the help writes them (`PATH:SYMBOL`).
    pub fn fields(self) -> &'static str {
        self.form().fields
    }

    fn field_count(self) -> usize {
        self.fields().split(':').count()
    }

    /// Stacks captured when `STACKS` is not given.
    pub fn default_stacks(self) -> StackSel {
        StackSel::parse(self.form().stacks).expect("the registry's stacks are u, k or uk")
    }
}

/// One probe of `-e`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub ty: ProbeType,
    /// The fields naming it: category and name; path and symbol; path, provider and name.
    pub fields: Vec<String>,
    pub stacks: StackSel,
    /// `:count`: hits counted in the kernel per thread and stacks, a row per second.
    pub counting: bool,
}

impl Probe {
    /// Parse `token` when its first field is a probe prefix; `Ok(None)` otherwise.
    pub fn parse(token: &str) -> Result<Option<Self>, SpecError> {
        let fields: Vec<&str> = token.split(':').collect();
        let Some(ty) = ProbeType::from_prefix(fields[0]) else {
            return Ok(None);
        };
        let n = ty.field_count();
        let form = || SpecError::ProbeForm {
            token: token.to_string(),
            form: format!("{}:{}[:STACKS][:count]", ty.prefix(), ty.fields()),
        };
        if fields.len() < 1 + n || fields[1..=n].iter().any(|f| f.is_empty()) {
            return Err(form());
        }
        let mut probe = Probe {
            ty,
            fields: fields[1..=n].iter().map(|s| s.to_string()).collect(),
            stacks: ty.default_stacks(),
            counting: false,
        };
        let mut stacks_given = false;
        for opt in &fields[1 + n..] {
            match *opt {
                "count" if !probe.counting => probe.counting = true,
                s if !stacks_given && !probe.counting && StackSel::parse(s).is_some() => {
                    probe.stacks = StackSel::parse(s).expect("checked");
                    stacks_given = true;
                }
                _ => return Err(form()),
            }
        }
        // Counted hits are keyed by the kernel's stack ids (frame-pointer walks); a `d` stack
        // is unwound in user space, one hit at a time.
        if probe.counting && probe.stacks.dwarf() {
            return Err(SpecError::CountedDwarf(token.to_string()));
        }
        Ok(Some(probe))
    }

    /// The `probe` column's value: the spec without its stacks and `count` options
    /// (`tp:sched:sched_process_fork`).
    pub fn name(&self) -> String {
        format!("{}:{}", self.ty.prefix(), self.fields.join(":"))
    }

    /// The normalized spec, as stored in the stream metadata.
    pub fn normalized(&self) -> String {
        let count = if self.counting { ":count" } else { "" };
        format!("{}:{}{count}", self.name(), self.stacks)
    }

    /// The path of a uprobe, uretprobe or USDT probe.
    pub fn path(&self) -> Option<&str> {
        (self.ty != ProbeType::Tp).then(|| self.fields[0].as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(s: &str) -> Probe {
        Probe::parse(s).unwrap().unwrap()
    }

    #[test]
    fn every_registered_form_is_a_probe_type() {
        for f in &PROBE_FORMS {
            let ty = ProbeType::from_prefix(f.prefix).expect("a probe type per registered form");
            assert_eq!(ty.fields(), f.fields);
        }
    }

    #[test]
    fn forms_and_defaults() {
        let p = probe("tp:sched:sched_process_fork");
        assert_eq!(
            (p.ty, p.stacks, p.counting),
            (ProbeType::Tp, StackSel::Both, false)
        );
        assert_eq!(p.name(), "tp:sched:sched_process_fork");
        assert_eq!(p.normalized(), "tp:sched:sched_process_fork:uk");
        let p = probe("uprobe:/bin/app:main:k:count");
        assert_eq!(p.fields, ["/bin/app", "main"]);
        assert_eq!((p.stacks, p.counting), (StackSel::Kernel, true));
        assert_eq!(p.normalized(), "uprobe:/bin/app:main:k:count");
        let p = probe("uretprobe:libc.so.6:malloc:count");
        assert_eq!(
            (p.ty, p.stacks, p.counting),
            (ProbeType::Uretprobe, StackSel::User, true)
        );
        assert_eq!(p.path(), Some("libc.so.6"));
        let p = probe("usdt:/bin/app:prov:tick");
        assert_eq!(p.fields, ["/bin/app", "prov", "tick"]);
        assert_eq!(Probe::parse("profile:u").unwrap(), None);
    }

    #[test]
    fn bad_forms_name_the_token_and_the_form() {
        for bad in [
            "tp:sched",
            "tp::x",
            "uprobe:/bin/app",
            "usdt:/bin/app:prov",
            "tp:a:b:x",
            "tp:a:b:count:u",
            "tp:a:b:u:u",
            "tp:a:b:count:count",
        ] {
            let e = Probe::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(bad) && e.contains("[:STACKS][:count]"),
                "{bad}: {e}"
            );
        }
    }
}
