#!/usr/bin/env python3
# stacks-query/bench/measure.py — wall time and each process's peak RSS (wait4) of
# `stacks-query -d STORE QUERY | stacks-pprof > /dev/null`, best of REPS runs.
"""Usage: measure.py BIN_DIR STORE [QUERY] [REPS]"""

import os
import subprocess
import sys
import time


def once(bin_dir, store, query):
    start = time.monotonic()
    q = subprocess.Popen([os.path.join(bin_dir, "stacks-query"), "-d", store, query, "-f", "arrow"],
                         stdout=subprocess.PIPE)
    p = subprocess.Popen([os.path.join(bin_dir, "stacks-pprof")], stdin=q.stdout,
                         stdout=subprocess.DEVNULL)
    q.stdout.close()
    peaks = {}
    for name, proc in (("query", q), ("pprof", p)):
        _, status, ru = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"measure: {name} failed")
        peaks[name] = ru.ru_maxrss // 1024
    return time.monotonic() - start, peaks


def main():
    bin_dir, store = sys.argv[1], sys.argv[2]
    query = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    runs = [once(bin_dir, store, query) for _ in range(reps)]
    wall = min(r[0] for r in runs)
    q = max(r[1]["query"] for r in runs)
    p = max(r[1]["pprof"] for r in runs)
    print(f"{store} {query}: best wall {wall:.2f} s of {reps}; peak RSS stacks-query {q} MiB, "
          f"stacks-pprof {p} MiB")


if __name__ == "__main__":
    main()
