"""Load for stacks-otlp's receiver: POST one OTLP profiles request (a file stacks-otlp wrote) to
URL again and again, paced so that RATE events a second arrive for SECONDS, while sampling the
resident memory of process PID twice a second. The events of the request are counted with
OpenTelemetry's own Python bindings (PyPI opentelemetry-proto): per sample, its timestamps (or
its values when it has none), in the profiles of one sample type per kind, as stacks-otlp's
decoder makes one row per event of a kind.

usage: load.py URL REQUEST RATE SECONDS PID
prints JSON: requests sent and answered 200, events sent, failures, the wall time, the memory
samples [seconds, RSS bytes] and the events of one request.
"""

import json
import sys
import time
import urllib.request

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc

url, path, rate, seconds, pid = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
body = open(path, "rb").read()
request = svc.ExportProfilesServiceRequest()
request.ParseFromString(body)
strings = request.dictionary.string_table

# Rows per request: a kind's count and value profiles make one row per event, so count the
# events of every profile but the count profiles that go with a value profile of the same scope
# and the same samples (stacks-otlp writes both with the same identities and timestamps).
events = 0
for rp in request.resource_profiles:
    for sp in rp.scope_profiles:
        seen = set()
        for p in sp.profiles:
            shape = tuple((s.stack_index, tuple(sorted(s.attribute_indices)), s.link_index,
                           tuple(s.timestamps_unix_nano)) for s in p.samples)
            if shape in seen:
                continue
            seen.add(shape)
            events += sum(len(s.timestamps_unix_nano) or len(s.values) for s in p.samples)


def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


interval = events / rate
sent = ok = failed = 0
memory = []
start = time.monotonic()
next_sample = start
while True:
    now = time.monotonic()
    if now - start >= seconds:
        break
    if now >= next_sample:
        memory.append([round(now - start, 2), rss()])
        next_sample += 0.5
    due = start + sent * interval
    if now < due:
        time.sleep(min(due - now, max(0.0, next_sample - now)) or 0.001)
        continue
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/x-protobuf"})
    sent += 1
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            ok += r.status == 200
    except Exception as e:  # counted, reported
        failed += 1
        print(f"load.py: request {sent}: {e}", file=sys.stderr)
wall = time.monotonic() - start
memory.append([round(wall, 2), rss()])
print(json.dumps({"requests": sent, "ok": ok, "failed": failed, "events": ok * events,
                  "events_per_request": events, "wall": wall, "memory": memory}))
