//! End-to-end stacks-pprof and stacks-trace: real clients open what we write. From the
//! fixture stream of every event kind (`stacks_testkit::events::every_kind`, with known totals;
//! the converters' own tests use it too): `go tool pprof -raw` parses each profile and reports
//! the totals that went in; the SVG flame graph is well-formed XML (python3's parser); the
//! trace JSON passes the structural Trace Event checks; speedscope, the npm package's bundled
//! viewer, imports the trace, the pprof and the folded stacks inside headless Chromium without
//! an error, and the trace's screenshot is kept in `$CARGO_TARGET_DIR/test-artifacts/`.
//!
//! Needs Go (`go tool pprof`), python3, and chromium + the npm packages that
//! `scripts/setup-web` installs (it is run here; it is idempotent and quick once done).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use stacks_testkit::events::{MS, events_stream, every_kind};
use stacks_testkit::trace_check;
use stacks_tests::{bin, check, scratch};

/// The fixture stream, written once per test process.
fn fixture() -> PathBuf {
    // Kept for the whole process (a static is never dropped, so the directory stays).
    static PATH: OnceLock<(stacks_tests::ScratchDir, PathBuf)> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = scratch("render-fixture");
        let path = dir.join("every-kind.arrow");
        std::fs::write(&path, events_stream(&every_kind())).expect("write the fixture stream");
        (dir, path)
    })
    .1
    .clone()
}

/// Run a tool on the fixture, writing `out`; returns `out`.
fn tool(name: &str, args: &[&str], out: &Path) -> PathBuf {
    let o = Command::new(bin(name))
        .arg(fixture())
        .arg("-o")
        .arg(out)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    check(&o, &format!("{name} {args:?}"));
    out.to_path_buf()
}

/// `go tool pprof -raw`: the sum of each sample type over every sample, and the header lines.
fn pprof_raw(profile: &Path) -> (BTreeMap<String, i64>, String) {
    let o = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-raw"])
        .arg(profile)
        .output()
        .expect("run go tool pprof (Debian: apt-get install golang-go)");
    check(&o, "go tool pprof -raw");
    let raw = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines = raw.lines().skip_while(|l| *l != "Samples:").skip(1);
    let types: Vec<String> = lines
        .next()
        .unwrap_or_else(|| panic!("no sample types in:\n{raw}"))
        .split_whitespace()
        .map(|t| t.trim_end_matches("[dflt]").to_string())
        .collect();
    let mut totals: BTreeMap<String, i64> = types.iter().map(|t| (t.clone(), 0)).collect();
    for line in lines.take_while(|l| !l.starts_with("Locations")) {
        let Some((values, _)) = line.split_once(':') else {
            continue;
        };
        let values: Option<Vec<i64>> = values.split_whitespace().map(|v| v.parse().ok()).collect();
        // Label lines (`comm:[app]`) have no numbers before the colon.
        let Some(values) = values.filter(|v| v.len() == types.len()) else {
            continue;
        };
        for (t, v) in types.iter().zip(values) {
            *totals.get_mut(t).expect("type") += v;
        }
    }
    (totals, raw)
}

#[test]
fn go_pprof_reads_every_profile() {
    let dir = scratch("render-pprof");
    let cpu = tool("stacks-pprof", &[], &dir.join("cpu.pb.gz"));
    let (totals, raw) = pprof_raw(&cpu);
    assert_eq!(totals["samples/count"], 4, "{raw}");
    assert_eq!(totals["cpu/nanoseconds"], 40 * MS, "{raw}");
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    assert!(raw.contains("Period: 10101010"), "{raw}");
    assert!(raw.contains("[kernel.kallsyms]"), "kernel mapping:\n{raw}");

    let off = tool(
        "stacks-pprof",
        &["--kind", "switch"],
        &dir.join("off.pb.gz"),
    );
    let (totals, raw) = pprof_raw(&off);
    assert_eq!(totals["intervals/count"], 6, "{raw}");
    assert_eq!(totals["offcpu/nanoseconds"], 7 * MS + 400_000, "{raw}");
    assert!(raw.contains("[folded short off-CPU intervals]"), "{raw}");

    let all = tool(
        "stacks-pprof",
        &[
            "--kind",
            "all",
            "--annotate",
            "--process-name",
            "--delimiter",
        ],
        &dir.join("all.pb.gz"),
    );
    let (totals, raw) = pprof_raw(&all);
    let want: BTreeMap<String, i64> = [
        ("samples/count", 4),
        ("cpu/nanoseconds", 40 * MS),
        ("intervals/count", 6),
        ("offcpu/nanoseconds", 7 * MS + 400_000),
        // every_kind() has no wake and no alloc rows: their sample types sum to 0.
        ("wakeups/count", 0),
        ("waited/nanoseconds", 0),
        ("rss_events/count", 20),
        ("rss_growth/bytes", 81920),
        ("block_requests/count", 1),
        ("block/bytes", 8192),
        ("vfs_calls/count", 1),
        ("vfs/bytes", 100),
        ("net_calls/count", 1),
        ("net/bytes", 1500),
        ("uring_requests/count", 0),
        ("uring/bytes", 0),
        ("state_samples/count", 0),
        ("wall/nanoseconds", 0),
        ("hits/count", 3),
        ("span_entries/count", 0),
        ("span/nanoseconds", 0),
        ("alloc_events/count", 0),
        ("alloc_space/bytes", 0),
        ("exec/count", 1),
        ("fork/count", 1),
        ("exit/count", 1),
        ("lost/count", 2),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(totals, want, "{raw}");
    assert!(raw.contains("do_syscall_64_[k]"), "{raw}");
}

#[test]
fn svg_flame_graph_is_well_formed() {
    let dir = scratch("render-svg");
    let svg = tool(
        "stacks-pprof",
        &["--format", "svg", "--kind", "switch"],
        &dir.join("off.svg"),
    );
    let o = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E\n\
             root = E.parse(sys.argv[1]).getroot()\n\
             print(root.tag)\n\
             print(sum(1 for e in root.iter() if e.tag.endswith('}g')))",
        ])
        .arg(&svg)
        .output()
        .expect("run python3");
    check(&o, "python3 xml parse of the SVG");
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("{http://www.w3.org/2000/svg}svg"),
        "{out}"
    );
    let groups: usize = lines.next().and_then(|n| n.parse().ok()).expect("count");
    assert!(groups >= 4, "a frame group per frame: {out}");
    let text = std::fs::read_to_string(&svg).expect("read svg");
    assert!(text.contains("stacks: offcpu (nanoseconds)"), "title");
    assert!(text.contains("[folded short off-CPU intervals]"));
}

#[test]
fn trace_json_is_valid_trace_event_format() {
    let dir = scratch("render-trace");
    let trace = tool("stacks-trace", &[], &dir.join("trace.json"));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).expect("read trace")).expect("JSON");
    let s = trace_check::check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    assert_eq!(s.durations_ns["off-CPU (sleeping)"], 7 * MS);
    assert_eq!(s.durations_ns["on-CPU"], MS);
    assert_eq!(s.names["cpu sample"], 4);
    assert_eq!(s.names["rss"], 2);
    assert_eq!(s.phases["b"], s.phases["e"]);
    assert!(s.frames > 0);
    assert_eq!(s.tracks[&(10, 0)], "app");
}

/// Set up chromium and the npm packages (scripts/setup-web); the cache directory.
fn web_dir() -> PathBuf {
    let script = stacks_tests::crate_dir().join("../scripts/setup-web");
    let o = Command::new(&script)
        .output()
        .expect("run scripts/setup-web");
    check(&o, "scripts/setup-web");
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}

/// Opens a profile in speedscope's bundled viewer in headless Chromium (driven by
/// playwright-core), the way speedscope's own CLI does: a script calling
/// `speedscope.loadFileFromBase64`, loaded through `#localProfilePath=`. Prints one JSON line:
/// the title, page errors, console errors and dialogs (a rejected file raises an alert), and
/// the console log.
const SPEEDSCOPE_JS: &str = r#"
const fs = require('fs');
const path = require('path');
const [webDir, profile, screenshot] = process.argv.slice(2);
const { chromium } = require(path.join(webDir, 'node_modules', 'playwright-core'));
(async () => {
  const index = path.join(webDir, 'node_modules', 'speedscope', 'dist', 'release', 'index.html');
  const loader = path.join(path.dirname(screenshot), path.basename(profile) + '.load.js');
  const b64 = fs.readFileSync(profile).toString('base64');
  fs.writeFileSync(loader,
    `speedscope.loadFileFromBase64(${JSON.stringify(path.basename(profile))}, ${JSON.stringify(b64)})`);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
  const errors = [];
  const log = [];
  page.on('pageerror', e => errors.push('page error: ' + e.message));
  page.on('console', m => {
    log.push(m.type() + ': ' + m.text());
    if (m.type() === 'error') errors.push('console error: ' + m.text());
  });
  page.on('dialog', async d => { errors.push('dialog: ' + d.message()); await d.dismiss(); });
  await page.goto('file://' + index + '#localProfilePath=' + encodeURIComponent(loader));
  let title = '';
  try {
    await page.waitForFunction(() => document.title.endsWith(' - speedscope'), null, { timeout: 30000 });
  } catch (e) {
    errors.push('no profile title: ' + e.message.split('\n')[0]);
  }
  title = await page.title();
  await page.waitForTimeout(500);
  await page.screenshot({ path: screenshot });
  await browser.close();
  console.log(JSON.stringify({ title, errors, log }));
})().catch(e => { console.log(JSON.stringify({ title: '', errors: ['driver: ' + e.message], log: [] })); });
"#;

/// Load `profile` in speedscope; the screenshot goes to `screenshot`.
fn speedscope(web: &Path, profile: &Path, screenshot: &Path) -> serde_json::Value {
    let driver = screenshot.with_extension("driver.js");
    std::fs::write(&driver, SPEEDSCOPE_JS).expect("write driver");
    let o = Command::new("timeout")
        .args(["120", "node"])
        .arg(&driver)
        .arg(web)
        .arg(profile)
        .arg(screenshot)
        .output()
        .expect("run node");
    check(&o, "speedscope in headless chromium (timeout 120 s)");
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("driver output {e}: {out}"))
}

#[test]
fn speedscope_opens_trace_pprof_and_folded() {
    let web = web_dir();
    // Next to the build (target/debug/..) unless CARGO_TARGET_DIR says where that is.
    let artifacts = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| stacks_tests::bin_dir().join(".."))
        .join("test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("create test-artifacts");
    let dir = scratch("render-speedscope");
    let inputs = [
        (
            tool("stacks-trace", &[], &dir.join("trace.json")),
            "speedscope-trace.png",
            "Importing as Trace Event Format",
        ),
        (
            tool(
                "stacks-pprof",
                &["--kind", "switch"],
                &dir.join("off.pb.gz"),
            ),
            "speedscope-pprof.png",
            "Importing as",
        ),
        (
            tool(
                "stacks-pprof",
                &["--format", "folded", "--process-name", "--annotate"],
                &dir.join("cpu.folded"),
            ),
            "speedscope-folded.png",
            "Importing as",
        ),
    ];
    for (profile, shot, importing) in inputs {
        let screenshot = artifacts.join(shot);
        let r = speedscope(&web, &profile, &screenshot);
        let title = r["title"].as_str().unwrap_or_default();
        assert!(
            title.ends_with(" - speedscope"),
            "{}: title {title:?}: {r}",
            profile.display()
        );
        assert_eq!(
            r["errors"],
            serde_json::json!([]),
            "{}: {r}",
            profile.display()
        );
        let log = r["log"].to_string();
        assert!(log.contains(importing), "{}: {log}", profile.display());
        // speedscope only warns about slices that do not nest; we must not have any.
        for complaint in ["Tried to end", "still open", "stack was empty"] {
            assert!(!log.contains(complaint), "{}: {log}", profile.display());
        }
        let png = std::fs::read(&screenshot).expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        println!("speedscope screenshot: {}", screenshot.display());
    }
}

/// A dictionary-encoded stack column (schema version 2) gives the profile `go tool pprof
/// -raw` shows for the plain one, sample for sample.
#[test]
fn go_pprof_reads_the_same_profile_from_dictionary_stacks() {
    let dir = scratch("render-pprof-dict");
    let encoded = dir.join("every-kind-dict.arrow");
    let bytes = stacks_testkit::events::events_stream_encoded(&every_kind());
    std::fs::write(&encoded, bytes).unwrap();
    let run = |input: &Path, out: &Path| {
        let o = Command::new(bin("stacks-pprof"))
            .arg(input)
            .arg("-o")
            .arg(out)
            .args(["--kind", "profile,switch,rss,block,vfs,net"])
            .output()
            .expect("run stacks-pprof");
        check(&o, "stacks-pprof");
        pprof_raw(out)
    };
    let (plain_totals, plain_raw) = run(&fixture(), &dir.join("plain.pb.gz"));
    let (dict_totals, dict_raw) = run(&encoded, &dir.join("dict.pb.gz"));
    assert!(plain_totals.values().any(|v| *v > 0), "{plain_totals:?}");
    assert_eq!(dict_totals, plain_totals);
    assert_eq!(dict_raw, plain_raw, "go tool pprof -raw");
    let _ = std::fs::remove_dir_all(&dir);
}
