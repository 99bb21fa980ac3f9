"""A minimal OTLP/HTTP trace receiver, run as its own process: `python -m tests.otlp_receiver OUT`.

It answers `POST /v1/traces` (a protobuf `ExportTraceServiceRequest`, gzip or not) as a
collector does and appends each span to OUT as one JSON line: service, trace and span ids
(hex), parent span id ("" for a root), name, start (ns), kind, attributes and status code.
It listens on a free port of 127.0.0.1 and prints `listening PORT` once it accepts
connections.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

_write = threading.Lock()


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in pairs:
        assert isinstance(kv, KeyValue)
        out[kv.key] = value(kv.value)
    return out


def span_lines(request: ExportTraceServiceRequest) -> list[str]:
    lines = []
    for resource_spans in request.resource_spans:
        service = attributes(resource_spans.resource.attributes).get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                row = {
                    "service": service,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "start": span.start_time_unix_nano,
                    "kind": span.kind,
                    "attributes": attributes(span.attributes),
                    "status": span.status.code,
                }
                lines.append(json.dumps(row) + "\n")
    return lines


def serve(out: Path) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with _write, out.open("a") as f:
                f.writelines(span_lines(request))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per export would bury the test's own output

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
