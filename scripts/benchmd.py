"""benchmd — what scripts/bench_*.py share: their checks before a run and writing their section
of BENCHMARKS.md.

A section runs from its BEGIN marker to its END marker, both included in the text given; a
file without the markers gets the section appended.
"""


import os
import re
import sys
import time


def preflight(name, why_root, tools):
    """Exit with a one-line error unless running as root and every binary of `tools` is built."""
    if os.geteuid() != 0:
        sys.exit(f"{name}: error: needs root ({why_root})")
    for tool in tools:
        if not os.path.exists(tool):
            sys.exit(f"{name}: error: {tool} is missing; build release first (scripts/bench)")


def replace_section(out, begin, end, section):
    """Write `section` (holding `begin` … `end`) into the file `out` in place of the old one."""
    section = section.rstrip("\n")
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)


def reap(p, timeout=None):
    """Wait for the Popen `p` with wait4 (Popen.wait would lose the rusage), killing it after
    `timeout` seconds; its user+sys CPU seconds, its children's included."""
    deadline = None if timeout is None else time.time() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, 0 if deadline is None else os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime
        if time.time() > deadline:
            p.kill()
            deadline = None
        time.sleep(0.05)


def bpf_runs(text, prog):
    """(runs, ns per run) of BPF program `prog` in a stacks-record summary (its line of
    `kernel.bpf_stats_enabled` run times); (0, 0.0) when it is not there."""
    for line in text.splitlines():
        if "BPF program runs" in line:
            for part in line.split("): ", 1)[1].split("; "):
                m = re.fullmatch(rf"{prog} (\d+) runs, (\d+) ns each", part.strip())
                if m:
                    return int(m.group(1)), float(m.group(2))
    return 0, 0.0
