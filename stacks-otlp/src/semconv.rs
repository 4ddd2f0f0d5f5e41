//! Where a stream's columns go in OpenTelemetry's terms: which label columns describe the process
//! (resource attributes), which describe one event (sample attributes, under their semantic
//! convention names), which make a trace link; a container's id read from a cgroup path; and the
//! `profile.frame.type` of a location.

use stacks_stream::col;
use stacks_stream::frames::{JIT_MODULE, PYTHON_MODULE};

/// Resource attribute: the host's name.
pub const HOST_NAME: &str = "host.name";
/// Resource attribute: the process id.
pub const PROCESS_PID: &str = "process.pid";
/// Resource attribute: the process's name.
pub const PROCESS_EXECUTABLE_NAME: &str = "process.executable.name";
/// Resource attribute: the container the process runs in (from its cgroup).
pub const CONTAINER_ID: &str = "container.id";
/// Sample attribute: the thread id.
pub const THREAD_ID: &str = "thread.id";
/// Sample attribute: the thread's name.
pub const THREAD_NAME: &str = "thread.name";
/// Sample attribute: the CPU the event happened on.
pub const CPU_LOGICAL_NUMBER: &str = "cpu.logical_number";
/// Sample attribute: the thread's cgroup v2 path.
pub const CGROUP: &str = "process.linux.cgroup";
/// Sample attribute: the name of the `tracing` span the thread was in.
pub const SPAN_NAME: &str = "span.name";
/// Location attribute: what runtime a frame belongs to.
pub const FRAME_TYPE: &str = "profile.frame.type";
/// Mapping attribute: the GNU build id of the binary, hex.
pub const BUILD_ID_GNU: &str = "process.executable.build_id.gnu";

/// What becomes of a label column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A resource attribute named so.
    Resource(&'static str),
    /// A sample attribute named so (the column's own name when it has no convention).
    Sample(Option<&'static str>),
    /// The cgroup: a sample attribute, and the resource's `container.id` when it names one.
    Cgroup,
    /// Half of a trace link.
    TraceId,
    SpanId,
    /// Nothing: the `kind` column (each kind is a profile of its own).
    Dropped,
}

/// The role of label column `name`.
pub fn role(name: &str) -> Role {
    match name {
        col::HOST => Role::Resource(HOST_NAME),
        col::PID => Role::Resource(PROCESS_PID),
        col::COMM => Role::Resource(PROCESS_EXECUTABLE_NAME),
        col::TID => Role::Sample(Some(THREAD_ID)),
        col::THREAD => Role::Sample(Some(THREAD_NAME)),
        col::CPU => Role::Sample(Some(CPU_LOGICAL_NUMBER)),
        col::SPAN_NAME => Role::Sample(Some(SPAN_NAME)),
        col::CGROUP => Role::Cgroup,
        col::TRACE_ID => Role::TraceId,
        col::SPAN_ID => Role::SpanId,
        col::KIND => Role::Dropped,
        _ => Role::Sample(None),
    }
}

/// The container id a cgroup v2 path names: a path component that is 64 hex digits, alone
/// (cgroupfs: `/docker/ID`, `/kubepods/…/ID`) or as a systemd scope (`docker-ID.scope`,
/// `cri-containerd-ID.scope`, `crio-ID.scope`, `libpod-ID.scope`). The innermost wins.
pub fn container_id(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find_map(|part| {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let id = part.rsplit('-').next().unwrap_or(part);
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
    })
}

/// The `profile.frame.type` of a location: `kernel` in the kernel's mapping, `cpython` for
/// interpreted Python frames, `jit` for code named by a perf map, `go` for functions whose
/// source is a `.go` file, else `native`.
pub fn frame_type(kernel: bool, module: &str, file: &str) -> &'static str {
    if kernel {
        "kernel"
    } else if module == PYTHON_MODULE {
        "cpython"
    } else if module == JIT_MODULE {
        "jit"
    } else if file.ends_with(".go") {
        "go"
    } else {
        "native"
    }
}

/// A trace id as 32 hex digits (the `trace_id` column) in bytes, `None` when it is not one or
/// is all zeros (an invalid id).
pub fn trace_id(hex: &str) -> Option<[u8; 16]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        id[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    (id != [0; 16]).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_from_cgroups() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-{id}.scope"
            ),
            format!("/docker/{id}"),
            format!("/kubepods/besteffort/pod1/{id}"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            assert_eq!(container_id(&path), Some(id), "{path}");
        }
        for path in [
            "/system.slice/nginx.service",
            "/user.slice/user-0.slice/session-1.scope",
            "/",
            "",
        ] {
            assert_eq!(container_id(path), None, "{path}");
        }
    }

    #[test]
    fn frame_types() {
        assert_eq!(frame_type(true, "[kernel.kallsyms]", ""), "kernel");
        assert_eq!(frame_type(false, PYTHON_MODULE, "app.py"), "cpython");
        assert_eq!(frame_type(false, JIT_MODULE, ""), "jit");
        assert_eq!(frame_type(false, "/usr/bin/app", "/src/main.go"), "go");
        assert_eq!(frame_type(false, "/usr/bin/app", "src/main.rs"), "native");
    }

    #[test]
    fn trace_ids() {
        let id = trace_id("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        assert_eq!(id[0], 0x4b);
        assert_eq!(id[15], 0x36);
        assert_eq!(trace_id("00000000000000000000000000000000"), None);
        assert_eq!(trace_id("4bf92f3577b34da6"), None);
        assert_eq!(trace_id("zzf92f3577b34da6a3ce929d0e0e4736"), None);
    }
}
