"""A stand-in OTLP/HTTP profiles receiver on loopback for stacks-otlp's push tests: decodes each
POST with OpenTelemetry's Python bindings (PyPI opentelemetry-proto) and appends one JSON line per
request to LOG (path, content type and encoding, the Authorization header, resources, profiles,
samples, values and their sum). MODE says how it answers:

  ok     200 with an empty ExportProfilesServiceResponse
  busy   503 (Retry-After: 0) to the first request, then as ok
  bad    400 with a google.rpc.Status whose message is "index out of range"

usage: receiver.py MODE LOG   (prints the port it listens on, then serves until killed)
"""

import gzip
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

mode, log = sys.argv[1], sys.argv[2]
seen = {"requests": 0}


def status(message):
    # google.rpc.Status: field 1 code (int32), field 2 message (string).
    data = message.encode()
    return b"\x08\x03\x12" + bytes([len(data)]) + data


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, body, headers=()):
        self.send_response(code)
        self.send_header("Content-Type", "application/x-protobuf")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        seen["requests"] += 1
        if mode == "busy" and seen["requests"] == 1:
            return self.answer(503, status("busy"), [("Retry-After", "0")])
        if mode == "bad":
            return self.answer(400, status("index out of range"))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        req = profiles_service_pb2.ExportProfilesServiceRequest()
        req.ParseFromString(body)
        profiles = [p for rp in req.resource_profiles for sp in rp.scope_profiles for p in sp.profiles]
        samples = [s for p in profiles for s in p.samples]
        with open(log, "a") as f:
            f.write(json.dumps({
                "path": self.path,
                "content_type": self.headers.get("Content-Type"),
                "encoding": self.headers.get("Content-Encoding"),
                "authorization": self.headers.get("Authorization"),
                "resources": len(req.resource_profiles),
                "profiles": len(profiles),
                "samples": len(samples),
                "values": sum(len(s.values) for s in samples),
                "sum": sum(sum(s.values) for s in samples),
                "strings": len(req.dictionary.string_table),
            }) + "\n")
        self.answer(200, profiles_service_pb2.ExportProfilesServiceResponse().SerializeToString())


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
