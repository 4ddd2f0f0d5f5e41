//! Where a row came from: every row carries the recording host and its thread's cgroup path.
//! The `cpu` workload runs in a cgroup made for the test (moved there before its exec): its
//! rows name that cgroup (the shell, sampled before it moved itself, the parent's).

use stacks_tests::{bpf_available, bpf_serial, check, read_stream, scratch, sh};

use arrow_array::cast::AsArray;

/// Where cgroup2 is mounted (`/proc/self/mountinfo`).
fn cgroup2_root() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (fields, rest) = l.split_once(" - ")?;
        (rest.split_whitespace().next()? == "cgroup2")
            .then(|| fields.split_whitespace().nth(4).map(str::to_string))
            .flatten()
    })
}

#[test]
fn rows_name_their_host_and_cgroup() {
    if !bpf_available("rows_name_their_host_and_cgroup") {
        return;
    }
    let _serial = bpf_serial();
    let root = cgroup2_root().expect("a cgroup2 file system is mounted (cgroup v2 or hybrid)");
    let name = format!("stacks-test-{}", std::process::id());
    let cg = format!("{root}/{name}");
    std::fs::create_dir(&cg).expect("create a test cgroup");
    let dir = scratch("origin");
    let raw = dir.join("raw.arrow");
    let out = sh(&format!(
        "stacks-record -e profile:u:99 -o {raw} -- sh -c 'echo $$ > {cg}/cgroup.procs && exec \
         stacks-workload cpu --seconds 1'",
        raw = raw.display()
    ));
    let _ = std::fs::remove_dir(&cg);
    check(&out, "record the cpu workload in a cgroup");
    let host = stacks_stream::sys::hostname();
    let mut profile = 0;
    for b in read_stream(&raw) {
        let kind = b.column_by_name("kind").unwrap().as_string::<i32>();
        let hosts = b.column_by_name("host").unwrap().as_string::<i32>();
        let cgroups = b.column_by_name("cgroup").unwrap().as_string::<i32>();
        let comms = b.column_by_name("comm").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            assert_eq!(hosts.value(i), host, "every row names the host");
            // The workload's samples: `sh` runs (and may be sampled) in the parent's cgroup
            // until it has moved itself; it execs the workload after the move.
            if kind.value(i) == "profile" && comms.value(i) == "stacks-workload" {
                profile += 1;
                assert_eq!(
                    cgroups.value(i),
                    format!("/{name}"),
                    "the workload's cgroup"
                );
            }
        }
    }
    assert!(profile > 50, "{profile} CPU samples");
}
