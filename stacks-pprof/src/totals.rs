//! Per-function sums over a decoded profile (flat = leaf, cumulative = anywhere in the stack),
//! the numbers `pprof -top` shows; tests compare them with what went into the stream.

use std::collections::{HashMap, HashSet};

use crate::proto::{Function, Location, Profile};

struct Index<'a> {
    profile: &'a Profile,
    locations: HashMap<u64, &'a Location>,
    functions: HashMap<u64, &'a Function>,
}

impl<'a> Index<'a> {
    fn new(profile: &'a Profile) -> Self {
        Self {
            profile,
            locations: profile.location.iter().map(|l| (l.id, l)).collect(),
            functions: profile.function.iter().map(|f| (f.id, f)).collect(),
        }
    }

    fn function_name(&self, function_id: u64) -> Option<&'a str> {
        let f = self.functions.get(&function_id)?;
        let idx = usize::try_from(f.name).ok()?;
        self.profile.string_table.get(idx).map(String::as_str)
    }
}

/// Value `sample_index` summed by the innermost function of each sample: the first line of the
/// sample's first (leaf) location. Samples without locations are not counted.
pub fn leaf_function_totals(p: &Profile, sample_index: usize) -> HashMap<String, i64> {
    let index = Index::new(p);
    let mut totals = HashMap::new();
    for s in &p.sample {
        let value = s.value.get(sample_index).copied().unwrap_or(0);
        let leaf = s
            .location_id
            .first()
            .and_then(|id| index.locations.get(id))
            .and_then(|l| l.line.first())
            .and_then(|line| index.function_name(line.function_id));
        if let Some(name) = leaf {
            *totals.entry(name.to_string()).or_insert(0) += value;
        }
    }
    totals
}

/// Value `sample_index` summed by every function that appears anywhere in a sample's stack
/// (inlined ones included), each function counted once per sample however often it recurs.
pub fn cumulative_function_totals(p: &Profile, sample_index: usize) -> HashMap<String, i64> {
    let index = Index::new(p);
    let mut totals = HashMap::new();
    let mut seen = HashSet::new();
    for s in &p.sample {
        let value = s.value.get(sample_index).copied().unwrap_or(0);
        seen.clear();
        for line in s
            .location_id
            .iter()
            .filter_map(|id| index.locations.get(id))
            .flat_map(|l| l.line.iter())
        {
            if let Some(name) = index.function_name(line.function_id)
                && seen.insert(name)
            {
                *totals.entry(name.to_string()).or_insert(0) += value;
            }
        }
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Line, Sample};

    fn profile() -> Profile {
        let strings = ["", "leaf", "mid", "root"];
        let function = (1..=3)
            .map(|i| Function {
                id: i,
                name: i as i64,
                system_name: i as i64,
                ..Default::default()
            })
            .collect();
        let line = |f| Line {
            function_id: f,
            line: 0,
            column: 0,
        };
        // Location 1: `leaf` inlined into `mid`; location 2: `root`; location 3: `mid` again.
        let location = vec![
            Location {
                id: 1,
                line: vec![line(1), line(2)],
                ..Default::default()
            },
            Location {
                id: 2,
                line: vec![line(3)],
                ..Default::default()
            },
            Location {
                id: 3,
                line: vec![line(2)],
                ..Default::default()
            },
        ];
        let sample = vec![
            Sample {
                location_id: vec![1, 3, 2],
                value: vec![1, 10],
                label: vec![],
            },
            Sample {
                location_id: vec![3, 2],
                value: vec![2, 20],
                label: vec![],
            },
            Sample {
                location_id: vec![],
                value: vec![4, 40],
                label: vec![],
            },
        ];
        Profile {
            sample,
            location,
            function,
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn leaf_uses_innermost_line() {
        let t = leaf_function_totals(&profile(), 1);
        assert_eq!(t.get("leaf"), Some(&10));
        assert_eq!(t.get("mid"), Some(&20));
        assert_eq!(t.get("root"), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn cumulative_counts_once_per_sample() {
        let t = cumulative_function_totals(&profile(), 0);
        assert_eq!(t.get("leaf"), Some(&1));
        assert_eq!(
            t.get("mid"),
            Some(&3),
            "mid recurs in sample 1 but counts once"
        );
        assert_eq!(t.get("root"), Some(&3));
    }

    #[test]
    fn out_of_range_index_counts_zero() {
        let t = leaf_function_totals(&profile(), 7);
        assert_eq!(t.get("leaf"), Some(&0));
    }
}
