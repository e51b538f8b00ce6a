#!/usr/bin/env python3
"""Time from process start to "handler ready" of a Lambda binary, and its
peak RSS, against a local stand-in for the Lambda Runtime API.

    start_to_ready.py BINARY [--event FILE] [--runs N] [--deadline-s S]

"Ready" is the binary's first GET /runtime/invocation/next: by then it has
built its AWS clients, read the config table and made its Kubernetes client
(everything `nodewright::runtime::connect` does in a cold start). With
--event, that event is then served once (deadline now + --deadline-s) and
the reply and the process's peak RSS (VmHWM) are printed.

The binary gets this process's environment (point it at the emulators:
AWS_ENDPOINT_URL & co. from tests/harness/aws/moto.sh, KUBECONFIG, and
NODEWRIGHT_CLUSTER_NAME) plus the variables Lambda sets. Needs only the
Python standard library. Prints one line per run and a median.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid


class RuntimeApi(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, event: bytes | None, deadline_s: float):
        super().__init__(("127.0.0.1", 0), Handler)
        self.event = event
        self.deadline_s = deadline_s
        self.first_next = threading.Event()
        self.first_next_at = 0.0
        self.served = False
        self.response = threading.Event()
        self.response_body = b""
        self.response_at = 0.0
        self.error = b""


class Handler(http.server.BaseHTTPRequestHandler):
    server: RuntimeApi

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        if not self.path.endswith("/runtime/invocation/next"):
            self.send_error(404)
            return
        s = self.server
        if not s.first_next.is_set():
            s.first_next_at = time.monotonic()
            s.first_next.set()
        if s.event is None or s.served:
            # No (more) invocations: hold the long poll, as Lambda does.
            time.sleep(3600)
            return
        s.served = True
        request_id = str(uuid.uuid4())
        deadline_ms = int((time.time() + s.deadline_s) * 1000)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Lambda-Runtime-Aws-Request-Id", request_id)
        self.send_header("Lambda-Runtime-Deadline-Ms", str(deadline_ms))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:local")
        self.send_header("Content-Length", str(len(s.event)))
        self.end_headers()
        self.wfile.write(s.event)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        s = self.server
        if "/response" in self.path or "/error" in self.path:
            s.response_body = body if "/response" in self.path else b"ERROR " + body
            s.response_at = time.monotonic()
            s.response.set()
        elif "/init/error" in self.path:
            s.error = body
            s.response.set()
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()


def vm_hwm_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def one_run(binary: str, event: bytes | None, deadline_s: float, memory_mb: int, log) -> dict:
    api = RuntimeApi(event, deadline_s)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    name = os.path.basename(os.path.dirname(binary)) if os.path.basename(binary) == "bootstrap" else os.path.basename(binary)
    env = dict(os.environ)
    env.update({
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{api.server_address[1]}",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "local",
    })
    t0 = time.monotonic()
    proc = subprocess.Popen([binary], env=env, stdout=log or subprocess.DEVNULL, stderr=log or subprocess.PIPE)
    out: dict = {}
    try:
        while not api.first_next.wait(0.05):
            if proc.poll() is not None:
                tail = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else "(see the log)"
                raise RuntimeError(f"{binary} exited with {proc.returncode} before asking for an event: {tail}")
            if time.monotonic() - t0 > 60:
                raise RuntimeError(f"{binary} not ready after 60 s")
        out["ready_ms"] = (api.first_next_at - t0) * 1000
        out["rss_ready_kb"] = vm_hwm_kb(proc.pid)
        if event is not None:
            if not api.response.wait(deadline_s + 30):
                raise RuntimeError("no reply to the invocation")
            out["invoke_ms"] = (api.response_at - api.first_next_at) * 1000
            out["reply"] = api.response_body.decode(errors="replace") or api.error.decode(errors="replace")
            time.sleep(0.1)  # the next /next arrives after the reply
            out["rss_peak_kb"] = vm_hwm_kb(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        api.shutdown()
        api.server_close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--event", help="serve this event once after ready")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--deadline-s", type=float, default=10.0)
    ap.add_argument("--memory-mb", type=int, default=128)
    ap.add_argument("--log", help="append the binary's output to this file")
    a = ap.parse_args()
    event = None
    if a.event:
        with open(a.event, "rb") as f:
            event = f.read()
        json.loads(event)
    ready = []
    for i in range(a.runs):
        log = open(a.log, "ab") if a.log else None
        try:
            r = one_run(os.path.abspath(a.binary), event, a.deadline_s, a.memory_mb, log)
        finally:
            if log:
                log.close()
        ready.append(r["ready_ms"])
        line = f"run {i + 1}: ready in {r['ready_ms']:.1f} ms, VmHWM {r['rss_ready_kb'] / 1024:.1f} MiB at ready"
        if event is not None:
            line += f"; invocation {r['invoke_ms']:.0f} ms, reply {r['reply'][:120]}, VmHWM {r['rss_peak_kb'] / 1024:.1f} MiB after"
        print(line, flush=True)
    binary = os.path.abspath(a.binary)
    name = os.path.basename(os.path.dirname(binary)) if os.path.basename(binary) == "bootstrap" else os.path.basename(binary)
    print(f"{name}: start to ready median {statistics.median(ready):.1f} ms "
          f"(min {min(ready):.1f}, max {max(ready):.1f}) over {a.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
