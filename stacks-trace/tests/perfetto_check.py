#!/usr/bin/env python3
"""Decode a Perfetto trace with Perfetto's own Python bindings (PyPI `perfetto`: its
perfetto_trace_pb2, not our messages) and check it the way trace_processor reads it; print a
JSON summary for the Rust tests to compare with the rows that went in.

Checked (each failure is a line in `errors`):
* the first packet of each sequence clears its incremental state; every packet has a trusted
  sequence id;
* every interned id a packet refers to (event and annotation names, annotation values,
  callstacks, their frames, function names, source paths, mappings, build ids, mapping paths)
  was defined earlier on its sequence, or in the same packet; no iid is defined twice;
* every track an event is on was described before; a thread track has a pid and a tid;
* on each track, in time order (file order at equal times), every slice begin has its end and
  every end its begin;
* every flow has one start and one end.

Usage: perfetto_check.py TRACE [--stacks]   (--stacks: the frames of each off-CPU slice)
"""

import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

SEQ_INCREMENTAL_STATE_CLEARED = 1
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4

# InternedData fields: (field, the table's name).
TABLES = [
    "event_names",
    "debug_annotation_names",
    "debug_annotation_string_values",
    "function_names",
    "source_paths",
    "mapping_paths",
    "build_ids",
    "mappings",
    "frames",
    "callstacks",
]


def main():
    path = sys.argv[1]
    want_stacks = "--stacks" in sys.argv[2:]
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    errors = []

    def err(msg):
        if len(errors) < 50:
            errors.append(msg)

    seqs = {}  # sequence id -> {table: {iid: value}}
    tracks = {}  # uuid -> descriptor
    events = []  # (ts, order, uuid, TrackEvent, seq tables)
    perf = collections.Counter()
    perf_stacks = collections.Counter()
    lost = 0
    states = collections.Counter()
    state_names = collections.Counter()
    first_flags = None

    for i, p in enumerate(trace.packet):
        if not p.HasField("trusted_packet_sequence_id"):
            err(f"packet {i}: no trusted_packet_sequence_id")
            continue
        seq = p.trusted_packet_sequence_id
        if seq not in seqs:
            if not (p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED):
                err(f"packet {i}: first packet of sequence {seq} does not clear its state")
            first_flags = p.sequence_flags
            seqs[seq] = {t: {} for t in TABLES}
        if p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            seqs[seq] = {t: {} for t in TABLES}
        tables = seqs[seq]
        if p.HasField("interned_data"):
            d = p.interned_data
            for t in TABLES:
                for entry in getattr(d, t):
                    if entry.iid == 0:
                        err(f"packet {i}: {t} entry with iid 0")
                    if entry.iid in tables[t]:
                        err(f"packet {i}: {t} iid {entry.iid} defined twice")
                    tables[t][entry.iid] = entry
            # References inside the definitions.
            for m in d.mappings:
                if m.HasField("build_id") and m.build_id not in tables["build_ids"]:
                    err(f"packet {i}: mapping {m.iid}: build id {m.build_id} undefined")
                for s in m.path_string_ids:
                    if s not in tables["mapping_paths"]:
                        err(f"packet {i}: mapping {m.iid}: path {s} undefined")
            for fr in d.frames:
                if fr.function_name_id not in tables["function_names"]:
                    err(f"packet {i}: frame {fr.iid}: function {fr.function_name_id} undefined")
                if fr.mapping_id not in tables["mappings"]:
                    err(f"packet {i}: frame {fr.iid}: mapping {fr.mapping_id} undefined")
                if fr.HasField("source_path_iid") and fr.source_path_iid not in tables["source_paths"]:
                    err(f"packet {i}: frame {fr.iid}: source path undefined")
            for cs in d.callstacks:
                for fid in cs.frame_ids:
                    if fid not in tables["frames"]:
                        err(f"packet {i}: callstack {cs.iid}: frame {fid} undefined")
        which = p.WhichOneof("data")
        if which == "track_descriptor":
            td = p.track_descriptor
            if td.HasField("thread") and not (td.thread.HasField("pid") and td.thread.HasField("tid")):
                err(f"packet {i}: thread track {td.uuid} without pid or tid")
            if td.HasField("parent_uuid") and td.parent_uuid not in tracks:
                err(f"packet {i}: track {td.uuid}: parent {td.parent_uuid} undescribed")
            tracks[td.uuid] = td
        elif which == "track_event":
            e = p.track_event
            if e.track_uuid not in tracks:
                err(f"packet {i}: event on undescribed track {e.track_uuid}")
            if e.HasField("name_iid") and e.name_iid not in tables["event_names"]:
                err(f"packet {i}: event name {e.name_iid} undefined")
            if e.HasField("callstack_iid") and e.callstack_iid not in tables["callstacks"]:
                err(f"packet {i}: callstack {e.callstack_iid} undefined")
            for a in e.debug_annotations:
                if a.name_iid not in tables["debug_annotation_names"]:
                    err(f"packet {i}: annotation name {a.name_iid} undefined")
                if a.HasField("string_value_iid") and a.string_value_iid not in tables["debug_annotation_string_values"]:
                    err(f"packet {i}: annotation value {a.string_value_iid} undefined")
            events.append((p.timestamp, i, e.track_uuid, e, tables))
        elif which == "perf_sample":
            s = p.perf_sample
            if s.HasField("kernel_records_lost"):
                lost += s.kernel_records_lost
                continue
            if s.HasField("callstack_iid"):
                if s.callstack_iid not in tables["callstacks"]:
                    err(f"packet {i}: perf sample callstack {s.callstack_iid} undefined")
                perf_stacks[s.tid] += 1
            perf[s.tid] += 1
        elif which == "generic_kernel_task_state_event":
            g = p.generic_kernel_task_state_event
            states[g.tid] += 1
            state_names[pb.GenericKernelTaskStateEvent.TaskStateEnum.Name(g.state)] += 1

    def thread_of(uuid):
        """The (pid, tid) of the thread a track belongs to, else None."""
        seen = set()
        while uuid in tracks and uuid not in seen:
            seen.add(uuid)
            td = tracks[uuid]
            if td.HasField("thread"):
                return td.thread.tid
            uuid = td.parent_uuid if td.HasField("parent_uuid") else None
        return None

    def lane_of(td):
        """A lane's kind: `io` of `THREAD io` or `THREAD io 2`."""
        words = td.name.split(" ")
        return words[-2] if words[-1].isdigit() and len(words) > 1 else words[-1]

    def name_of(e, tables):
        if e.HasField("name_iid"):
            return tables["event_names"].get(e.name_iid, pb.EventName()).name
        return e.name

    def annotations(e, tables):
        out = {}
        for a in e.debug_annotations:
            n = tables["debug_annotation_names"].get(a.name_iid, pb.DebugAnnotationName()).name
            if a.HasField("string_value_iid"):
                v = tables["debug_annotation_string_values"].get(a.string_value_iid)
                out[n] = v.str.decode() if v else None
            elif a.HasField("int_value"):
                out[n] = a.int_value
        return out

    def frames_of(iid, tables):
        cs = tables["callstacks"].get(iid)
        if cs is None:
            return []
        names = []
        for fid in cs.frame_ids:
            fr = tables["frames"].get(fid)
            fn = tables["function_names"].get(fr.function_name_id) if fr else None
            names.append(fn.str.decode() if fn else "?")
        return names

    # Slices per track, in time order (stable: file order at equal times).
    events.sort(key=lambda x: (x[0], x[1]))
    open_slices = collections.defaultdict(list)
    per_thread = collections.defaultdict(lambda: {
        "slices": collections.defaultdict(lambda: [0, 0]),
        "lanes": collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0])),
        "instants": collections.Counter(),
        "offcpu_stacks": [],
        "weights": collections.Counter(),
    })
    flows_out, flows_in = {}, {}
    counters = collections.Counter()
    lost_instants = 0
    for ts, i, uuid, e, tables in events:
        tid = thread_of(uuid)
        td = tracks.get(uuid)
        on_thread_track = td is not None and td.HasField("thread")
        for f in e.flow_ids:
            if f in flows_out:
                err(f"flow {f} started twice")
            flows_out[f] = tid
        for f in e.terminating_flow_ids:
            if f in flows_in:
                err(f"flow {f} ended twice")
            flows_in[f] = tid
        if e.type == BEGIN:
            open_slices[uuid].append((ts, e, tables))
        elif e.type == END:
            if not open_slices[uuid]:
                err(f"packet {i}: slice end without a begin on track {uuid}")
                continue
            start, b, btables = open_slices[uuid].pop()
            name = name_of(b, btables)
            if tid is None:
                continue
            t = per_thread[tid]
            if on_thread_track:
                s = t["slices"][name]
                s[0] += 1
                s[1] += ts - start
                if name.startswith("off-CPU") and want_stacks:
                    t["offcpu_stacks"].append(frames_of(b.callstack_iid, btables) if b.HasField("callstack_iid") else [])
            else:
                s = t["lanes"][lane_of(td)][name]
                s[0] += 1
                s[1] += ts - start
                s[2] += annotations(b, btables).get("bytes", 0) or 0
        elif e.type == INSTANT:
            name = name_of(e, tables)
            if tid is None:
                if name == "lost events":
                    lost_instants += annotations(e, tables).get("count", 0)
                continue
            per_thread[tid]["instants"][name] += 1
            if not on_thread_track and td is not None:
                # An operation standing for several calls, or without a duration, on its lane.
                s = per_thread[tid]["lanes"][lane_of(td)][name]
                s[0] += 1
                s[2] += annotations(e, tables).get("bytes", 0) or 0
            if e.HasField("callstack_weight"):
                per_thread[tid]["weights"][name] += e.callstack_weight
        elif e.type == COUNTER:
            counters[td.name if td else "?"] += 1
    for uuid, stack in open_slices.items():
        if stack:
            err(f"track {uuid}: {len(stack)} slices never ended")
    flows = []
    for f, src in flows_out.items():
        if f not in flows_in:
            err(f"flow {f} never ended")
            continue
        flows.append([src, flows_in[f]])
    for f in flows_in:
        if f not in flows_out:
            err(f"flow {f} ended without a start")

    threads = {}
    for uuid, td in tracks.items():
        if td.HasField("thread"):
            threads[str(td.thread.tid)] = {"pid": td.thread.pid, "name": td.thread.thread_name}
    processes = {str(td.process.pid): {"name": td.process.process_name, "labels": list(td.process.process_labels)}
                 for td in tracks.values() if td.HasField("process")}
    summary = {
        "errors": errors,
        "packets": len(trace.packet),
        "first_flags": first_flags,
        "threads": threads,
        "processes": processes,
        "per_thread": {str(k): v for k, v in per_thread.items()},
        "perf_samples": {str(k): v for k, v in perf.items()},
        "perf_samples_with_stack": {str(k): v for k, v in perf_stacks.items()},
        "states": {str(k): v for k, v in states.items()},
        "state_names": state_names,
        "flows": flows,
        "counters": counters,
        "lost": lost,
        "lost_instants": lost_instants,
        "interned": {t: sum(len(s[t]) for s in seqs.values()) for t in TABLES},
        "frame_kinds": collections.Counter(
            pb.Frame.Kind.Name(fr.kind) for s in seqs.values() for fr in s["frames"].values()),
    }
    json.dump(summary, sys.stdout)


if __name__ == "__main__":
    main()
