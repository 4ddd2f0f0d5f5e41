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
    // Its twin with the symbol table (no DWARF either), whose code is the same bytes: `go tool
    // objdump` reads the line of every instruction from it, the truth for the inlined frames.
    let twin = sh(&format!(
        "cd {d} && go build -ldflags='-w' -o {d}/prog.sym main.go && \
         cmp <(objcopy -O binary --only-section=.text {d}/prog /dev/stdout) \
             <(objcopy -O binary --only-section=.text {d}/prog.sym /dev/stdout) && \
         go tool objdump -s '^main.hot$' {d}/prog.sym"
    ));
    check(
        &twin,
        "the symbol-table twin, its code the same, disassembled",
    );
    let mix_line = format!("main.go:{}", line_of("mix-body"));
    // Lines `  main.go:22  0x464a4e  48be...  MOVQ ...`: the addresses of mix's inlined body.
    let mix_addrs: std::collections::HashSet<u64> = String::from_utf8_lossy(&twin.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(mix_line.as_str()))
                .then(|| w.next())
                .flatten()
                .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        })
        .collect();
    assert!(
        !mix_addrs.is_empty(),
        "go tool objdump shows no instruction at {mix_line}"
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
    // Samples whose leaf is an instruction of mix's body, by the disassembly.
    let in_mix = |s: &Vec<Frame>| s.first().is_some_and(|f| mix_addrs.contains(&f.addr));
    let truth = stacks.iter().filter(|s| in_mix(s)).count();
    let disagree: Vec<&Vec<Frame>> = stacks
        .iter()
        .filter(|s| shows_mix(s) != in_mix(s))
        .collect();
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
         (main.mix inlined in {inlined:.2}; its body's instructions are the leaf of {:.2}), \
         perf {theirs:.2} of {pn}",
        truth as f64 / n.max(1) as f64
    );
    let unnamed: Vec<&Vec<Frame>> = stacks.iter().filter(|s| !names_hot(s)).take(3).collect();
    assert!(n > 300, "too few samples: {n}");
    assert!(
        ours >= 0.95,
        "stacks names main.hot (main.go:{begin}-{end}) in {ours:.2} of {n} samples; some \
         that do not: {unnamed:#?}"
    );
    // Every sample in mix's body, and only those, shows it inlined (how many land there
    // depends on the CPU: 0.17-0.3 of them on this machine).
    assert!(
        truth * 20 >= n,
        "only {truth} of {n} samples are in main.mix's body: the check below would say little"
    );
    assert!(
        disagree.len() * 100 <= n,
        "{} of {n} samples show main.mix inlined where the disassembly does not put them in \
         its body, or the reverse ({mix} shown, {truth} in it); some: {:#?}",
        disagree.len(),
        &disagree[..disagree.len().min(3)]
    );
    assert!(
        ours >= theirs,
        "perf {theirs:.2} names more than stacks {ours:.2}"
    );
}
