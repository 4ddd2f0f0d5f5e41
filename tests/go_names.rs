//! Go without symbols: a Go program built with `-ldflags='-s -w'` has no symbol table and no
//! DWARF, only the runtime's `.gopclntab`. stacks-symbolize names its frames from that table
//! (function, file:line, inlined calls), measured against perf on the same program.

use arrow_array::cast::AsArray;
use stacks_tests::{
    Frame, bpf_available, bpf_serial, check, perf_share, read_frames, read_stream, scratch, sh,
};

const SOURCE: &str = include_str!("fixtures/go_names/main.go");

/// Line of the `MARK:` comment `mark` in the fixture.
fn line_of(mark: &str) -> u32 {
    let tag = format!("// MARK:{mark}");
    SOURCE
        .lines()
        .position(|l| l.ends_with(&tag))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no {tag} in the fixture"))
}

#[test]
fn stripped_go_is_named_from_gopclntab() {
    if !bpf_available("stripped_go_is_named_from_gopclntab") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("go-names");
    let d = dir.display();
    // The source as compiled in: no path of the checkout is kept in the test binary.
    std::fs::write(dir.join("main.go"), SOURCE).expect("write the Go program");
    let build = sh(&format!(
        "cd {d} && go build -ldflags='-s -w' -o {d}/prog main.go"
    ));
    check(
        &build,
        "go build -ldflags='-s -w' (apt-get install golang-go)",
    );
    // Stripped indeed: no symbol table, no DWARF, the function table kept.
    let sections = sh(&format!("readelf -S --wide {d}/prog"));
    check(&sections, "readelf -S");
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        sections.contains(".gopclntab")
            && !sections.contains(".symtab")
            && !sections.contains(".debug_info"),
        "not a stripped Go binary:\n{sections}"
    );

    let rec = sh(&format!(
        "stacks-record -e profile:u:499 -- {d}/prog 3 | stacks-symbolize -o {d}/sym.arrow"
    ));
    check(&rec, "recording and symbolizing the stripped Go program");
    let batches = read_stream(&dir.join("sym.arrow"));
    let mut stacks: Vec<Vec<Frame>> = Vec::new();
    for b in &batches {
        let kind = b.column_by_name("kind").unwrap().as_string::<i32>();
        let frames = read_frames(std::slice::from_ref(b));
        for (i, s) in frames.into_iter().enumerate() {
            if kind.value(i) == "profile" {
                stacks.push(s.unwrap_or_default());
            }
        }
    }
    let n = stacks.len();
    let (begin, end) = (line_of("hot-begin"), line_of("hot-end"));
    // The hot function, out of line, at a line of its own body.
    let names_hot = |s: &Vec<Frame>| {
        s.iter().any(|f| {
            f.function.as_deref() == Some("main.hot")
                && !f.inlined
                && f.file.as_deref().is_some_and(|p| p.ends_with("/main.go"))
                && f.line.is_some_and(|l| (begin..=end).contains(&l))
        })
    };
    // `mix` inlined into it: an inlined frame at mix's line, called from hot's loop.
    let shows_mix = |s: &Vec<Frame>| {
        s.windows(2).any(|w| {
            w[0].function.as_deref() == Some("main.mix")
                && w[0].inlined
                && w[0].line == Some(line_of("mix-body"))
                && w[1].function.as_deref() == Some("main.hot")
                && w[1].line == Some(line_of("mix-call"))
                && w[0].addr == w[1].addr
        })
    };
    let hot = stacks.iter().filter(|s| names_hot(s)).count();
    let mix = stacks.iter().filter(|s| shows_mix(s)).count();
    let ours = hot as f64 / n.max(1) as f64;
    let inlined = mix as f64 / n.max(1) as f64;

    let perf = sh(&format!(
        "perf record -q -e cpu-clock -F 499 -g -o {d}/perf.data -- {d}/prog 3 2> /dev/null && \
         perf script -i {d}/perf.data -F ip,sym 2>/dev/null"
    ));
    check(&perf, "perf record of the stripped Go program");
    let (theirs, pn) = perf_share(&String::from_utf8_lossy(&perf.stdout), "main.hot");
    eprintln!(
        "samples naming main.hot of the stripped Go program: stacks {ours:.2} of {n} \
         (main.mix inlined in {inlined:.2}), perf {theirs:.2} of {pn}"
    );
    let unnamed: Vec<&Vec<Frame>> = stacks.iter().filter(|s| !names_hot(s)).take(3).collect();
    assert!(n > 300, "too few samples: {n}");
    assert!(
        ours >= 0.95,
        "stacks names main.hot (main.go:{begin}-{end}) in {ours:.2} of {n} samples; some \
         that do not: {unnamed:#?}"
    );
    assert!(
        inlined >= 0.2,
        "the inlined main.mix shows in only {inlined:.2} of samples"
    );
    assert!(
        ours >= theirs,
        "perf {theirs:.2} names more than stacks {ours:.2}"
    );
}
