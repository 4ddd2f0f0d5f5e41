"""An OTLP profiles request as another sender makes it, built with OpenTelemetry's own Python
bindings (PyPI opentelemetry-proto) for stacks-otlp's receiver tests: CPU samples the way the
OpenTelemetry eBPF profiler sends them (sample type samples/count, period type cpu/nanoseconds,
timestamps only, no values), two processes, kernel and native frames typed by
profile.frame.type, an inlined call, thread attributes, a mapping with its build id.

usage: foreign.py REQUEST EXPECTED
  writes the serialized ExportProfilesServiceRequest to REQUEST and, to EXPECTED, JSON of what
  its rows must be: per (pid, tid, comm, thread, folded stack root first) the number of samples,
  and the period each sample weighs.
"""

import json
import random
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
from opentelemetry.proto.resource.v1 import resource_pb2

request_path, expected_path = sys.argv[1], sys.argv[2]
PERIOD = 50_000_000  # 20 Hz
START = 1_764_400_000_000_000_000

d = pb.ProfilesDictionary()
strings = {}


def s(text):
    if text not in strings:
        strings[text] = len(d.string_table)
        d.string_table.append(text)
    return strings[text]


s("")
d.mapping_table.add()
d.location_table.add()
d.function_table.add()
d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
d.attribute_table.add()
d.stack_table.add()


def attribute(key, value):
    a = d.attribute_table.add(key_strindex=s(key))
    if isinstance(value, int):
        a.value.int_value = value
    else:
        a.value.string_value = value
    return len(d.attribute_table) - 1


KERNEL = attribute("profile.frame.type", "kernel")
NATIVE = attribute("profile.frame.type", "native")
GO = attribute("profile.frame.type", "go")
BUILD_ID = attribute("process.executable.build_id.gnu", "ab12cd34")

d.mapping_table.add(filename_strindex=s("[kernel.kallsyms]"))
KMAP = len(d.mapping_table) - 1
d.mapping_table.add(
    memory_start=0x400000, memory_limit=0x800000, file_offset=0x1000,
    filename_strindex=s("/usr/bin/server"), attribute_indices=[BUILD_ID])
UMAP = len(d.mapping_table) - 1

functions = {}


def function(name, file):
    if name not in functions:
        d.function_table.add(name_strindex=s(name), system_name_strindex=s(name),
                             filename_strindex=s(file))
        functions[name] = len(d.function_table) - 1
    return functions[name]


def location(names, address, kernel=False, go=False):
    """A location of `names`, innermost (inlined) first."""
    loc = d.location_table.add(
        mapping_index=KMAP if kernel else UMAP, address=address,
        attribute_indices=[KERNEL if kernel else GO if go else NATIVE])
    for i, n in enumerate(names):
        loc.lines.add(function_index=function(n, "" if kernel else "server.go" if go else "server.c"),
                      line=0 if kernel else 10 + i)
    return len(d.location_table) - 1


def stack(locations):
    d.stack_table.add(location_indices=locations)
    return len(d.stack_table) - 1


# Leaf first, as OTLP orders a stack's locations.
main = location(["main"], 0x401000)
serve = location(["parse", "serve"], 0x402000)  # parse inlined into serve
compute = location(["compute"], 0x403000, go=True)
read = location(["ksys_read"], 0xffffffff81200000, kernel=True)
entry = location(["entry_SYSCALL_64"], 0xffffffff81000000, kernel=True)
STACKS = {
    stack([compute, serve, main]): ["main", "serve", "parse", "compute"],
    stack([serve, main]): ["main", "serve", "parse"],
    stack([read, entry, serve, main]): ["main", "serve", "parse", "entry_SYSCALL_64", "ksys_read"],
}

rng = random.Random(61)
processes = [(4242, "server", [(4242, "server"), (4250, "worker-1")]),
             (5151, "batch", [(5151, "batch")])]
expected = {}
request = svc.ExportProfilesServiceRequest()
for pid, comm, threads in processes:
    rp = request.resource_profiles.add()
    for k, v in [("host.name", "otel-host"), ("process.pid", pid),
                 ("process.executable.name", comm)]:
        kv = rp.resource.attributes.add(key=k)
        if isinstance(v, int):
            kv.value.int_value = v
        else:
            kv.value.string_value = v
    p = rp.scope_profiles.add().profiles.add()
    p.sample_type.type_strindex = s("samples")
    p.sample_type.unit_strindex = s("count")
    p.period_type.type_strindex = s("cpu")
    p.period_type.unit_strindex = s("nanoseconds")
    p.period = PERIOD
    p.time_unix_nano = START
    p.duration_nano = 10_000_000_000
    for tid, thread in threads:
        attrs = [attribute("thread.id", tid), attribute("thread.name", thread)]
        for st, names in STACKS.items():
            n = rng.randint(1, 40)
            sample = p.samples.add(stack_index=st, attribute_indices=attrs)
            sample.timestamps_unix_nano.extend(
                sorted(START + rng.randrange(10_000_000_000) for _ in range(n)))
            key = f"{pid}|{tid}|{comm}|{thread}|{';'.join(names)}"
            expected[key] = expected.get(key, 0) + n

request.dictionary.CopyFrom(d)
with open(request_path, "wb") as f:
    f.write(request.SerializeToString())
with open(expected_path, "w") as f:
    json.dump({"period": PERIOD, "samples": expected}, f)
