"""Decode an OTLP ExportProfilesServiceRequest written by stacks-otlp with the OpenTelemetry
Python bindings (PyPI opentelemetry-proto), apply the spec's rules (zero elements at index 0,
every index in range, sample shapes, timestamps inside the profile's window, merged duplicate
sample identities, link id sizes) and print a JSON summary for tests/otlp.rs:

  violations: the rules broken, one line each (the test wants none)
  totals: "type/unit" -> [sum of values, number of values, number of timestamps]
  frame_types: frame type -> number of locations; kernel_mismatch: locations whose frame
  type and mapping disagree about the kernel
  cumulative: "type/unit" -> {function name -> value of the samples it is anywhere in}
  resources: number of ResourceProfiles; resource_keys: the resource attribute keys seen

usage: check.py REQUEST [FUNCTION...]   (cumulative totals are given for these functions)
"""

import json
import sys
from collections import defaultdict

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

req = profiles_service_pb2.ExportProfilesServiceRequest()
with open(sys.argv[1], "rb") as f:
    req.ParseFromString(f.read())
wanted = sys.argv[2:]
d = req.dictionary
v = []


def in_range(i, table):
    return 0 <= i < len(table)


if not req.HasField("dictionary"):
    v.append("no dictionary")
if not d.string_table or d.string_table[0] != "":
    v.append('string_table[0] is not ""')
for name in ("mapping_table", "location_table", "function_table", "attribute_table", "stack_table"):
    table = getattr(d, name)
    if not table or table[0].ByteSize() != 0:
        v.append(f"{name}[0] is not the zero element")
if not d.link_table or d.link_table[0].trace_id != bytes(16) or d.link_table[0].span_id != bytes(8):
    v.append("link_table[0] is not 16 + 8 zero bytes")
for i, link in enumerate(d.link_table):
    if len(link.trace_id) != 16 or len(link.span_id) != 8:
        v.append(f"link {i}: ids of {len(link.trace_id)} and {len(link.span_id)} bytes")
for i, m in enumerate(d.mapping_table):
    if not in_range(m.filename_strindex, d.string_table):
        v.append(f"mapping {i}: filename out of range")
    if not (m.memory_start < m.memory_limit or (m.memory_start == 0 and m.memory_limit == 0)):
        v.append(f"mapping {i}: bounds")
    v += [f"mapping {i}: attribute {a}" for a in m.attribute_indices if not in_range(a, d.attribute_table)]
for i, fn in enumerate(d.function_table):
    for s in (fn.name_strindex, fn.system_name_strindex, fn.filename_strindex):
        if not in_range(s, d.string_table):
            v.append(f"function {i}: string out of range")
    if i > 0 and not (fn.name_strindex or fn.system_name_strindex or fn.filename_strindex):
        v.append(f"function {i}: no name, system name or file")
for i, a in enumerate(d.attribute_table):
    if not in_range(a.key_strindex, d.string_table) or not in_range(a.unit_strindex, d.string_table):
        v.append(f"attribute {i}: string out of range")


def attr(i):
    kv = d.attribute_table[i]
    val = kv.value
    kind = val.WhichOneof("value")
    value = getattr(val, kind) if kind else None
    if kind == "string_value_strindex":
        value = d.string_table[value]
    return d.string_table[kv.key_strindex], value


kernel_name = "[kernel.kallsyms]"
frame_types = defaultdict(int)
kernel_mismatch = 0
for i, loc in enumerate(d.location_table):
    if not in_range(loc.mapping_index, d.mapping_table):
        v.append(f"location {i}: mapping out of range")
        continue
    for line in loc.lines:
        if not in_range(line.function_index, d.function_table):
            v.append(f"location {i}: function out of range")
    if any(not in_range(a, d.attribute_table) for a in loc.attribute_indices):
        v.append(f"location {i}: attribute out of range")
        continue
    types = [val for key, val in map(attr, loc.attribute_indices) if key == "profile.frame.type"]
    if i == 0 or loc.mapping_index == 0:
        continue
    if len(types) != 1:
        v.append(f"location {i}: {len(types)} frame types")
        continue
    frame_types[types[0]] += 1
    in_kernel = d.string_table[d.mapping_table[loc.mapping_index].filename_strindex] == kernel_name
    if in_kernel != (types[0] == "kernel"):
        kernel_mismatch += 1
for i, st in enumerate(d.stack_table):
    v += [f"stack {i}: location {l}" for l in st.location_indices if not in_range(l, d.location_table)]


def functions(stack_index):
    names = set()
    for l in d.stack_table[stack_index].location_indices:
        for line in d.location_table[l].lines:
            names.add(d.string_table[d.function_table[line.function_index].name_strindex])
    return names


totals = defaultdict(lambda: [0, 0, 0])
cumulative = defaultdict(lambda: defaultdict(int))
resource_keys = set()
profiles = 0
for rp in req.resource_profiles:
    resource_keys.update(kv.key for kv in rp.resource.attributes)
    for sp in rp.scope_profiles:
        for p in sp.profiles:
            profiles += 1
            st = f"{d.string_table[p.sample_type.type_strindex]}/{d.string_table[p.sample_type.unit_strindex]}"
            start, end = p.time_unix_nano, p.time_unix_nano + p.duration_nano
            seen, shapes = set(), set()
            for s in p.samples:
                if not in_range(s.stack_index, d.stack_table) or not in_range(s.link_index, d.link_table):
                    v.append(f"{st}: sample stack or link out of range")
                    continue
                if any(not in_range(a, d.attribute_table) for a in s.attribute_indices):
                    v.append(f"{st}: sample attribute out of range")
                    continue
                keys = [d.attribute_table[a].key_strindex for a in s.attribute_indices]
                if len(keys) != len(set(keys)):
                    v.append(f"{st}: sample attribute key twice")
                nv, nt = len(s.values), len(s.timestamps_unix_nano)
                shapes.add((nv > 0, nt > 0))
                if nv == 0 and nt == 0:
                    v.append(f"{st}: sample without values or timestamps")
                elif nv and nt and nv != nt:
                    v.append(f"{st}: {nv} values, {nt} timestamps")
                elif nv > 1 and nt == 0:
                    v.append(f"{st}: several values without timestamps")
                outside = [t for t in s.timestamps_unix_nano if not start <= t < end]
                if outside:
                    v.append(f"{st}: {len(outside)} timestamps outside [{start}, {end})")
                identity = (s.stack_index, frozenset(s.attribute_indices), s.link_index)
                if identity in seen:
                    v.append(f"{st}: duplicate sample identity")
                seen.add(identity)
                total = sum(s.values)
                t = totals[st]
                t[0] += total
                t[1] += nv
                t[2] += nt
                for name in functions(s.stack_index):
                    if name in wanted:
                        cumulative[st][name] += total
            if len(shapes) > 1:
                v.append(f"{st}: samples of different shapes")

print(json.dumps({
    "violations": v,
    "totals": totals,
    "frame_types": frame_types,
    "kernel_mismatch": kernel_mismatch,
    "cumulative": cumulative,
    "resources": len(req.resource_profiles),
    "profiles": profiles,
    "resource_keys": sorted(resource_keys),
}))
