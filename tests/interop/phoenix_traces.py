"""Traces in a real OpenTelemetry backend: Arize Phoenix on free loopback ports, the gateway
exporting to it over OTLP/HTTP, a voice call with a tool call, and the span tree, names and GenAI
attributes read back from Phoenix's REST API.

    python tests/interop/phoenix_traces.py target/debug/livegate
"""

import asyncio
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import websockets

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
WAIT = 90
# Phoenix imports a large Python application before it listens: 35 s seen on a busy machine.
STARTUP = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, process, name, wait=WAIT):
    deadline = time.time() + wait
    while time.time() < deadline:
        if process.poll() is not None:
            sys.exit(f"{name} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            time.sleep(0.3)
    sys.exit(f"{name} did not answer on {url}")


class Tool(http.server.BaseHTTPRequestHandler):
    """The HTTP tool: echoes its arguments, keeps the traceparent it was handed."""

    seen = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        Tool.seen.append(self.headers.get("traceparent"))
        reply = json.dumps({"got": json.loads(body or b"{}")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def flatten(attributes, prefix=""):
    """Phoenix may nest dotted attribute names; flattened back to `a.b.c`."""
    flat = {}
    for key, value in (attributes or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def phoenix_spans(base):
    spans, cursor = [], None
    for _ in range(50):
        url = f"{base}/v1/projects/default/spans?limit=1000"
        if cursor:
            url += f"&cursor={cursor}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                page = json.load(response)
        except urllib.error.HTTPError as error:
            if error.code == 404:  # no project until the first span arrives
                return []
            raise
        spans.extend(page.get("data", []))
        cursor = page.get("next_cursor")
        if not cursor:
            break
    return spans


async def call(port):
    url = f"ws://127.0.0.1:{port}/ws/u1/s1?traceparent=00-{TRACE_ID}-{PARENT}-01"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "text", "text": "lookup order=42"}))
        while True:
            frame = await asyncio.wait_for(ws.recv(), WAIT)
            if isinstance(frame, str) and json.loads(frame).get("turnComplete"):
                break


def main():
    gateway_bin = sys.argv[1]
    work = tempfile.mkdtemp()
    port, grpc = free_port(), free_port()
    env = dict(os.environ, PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(grpc),
               PHOENIX_HOST="127.0.0.1", PHOENIX_WORKING_DIR=work)
    phoenix_log = open(os.path.join(work, "phoenix.log"), "w")
    phoenix = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"], env=env,
                               stdout=phoenix_log, stderr=subprocess.STDOUT)
    tool = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tool)
    threading.Thread(target=tool.serve_forever, daemon=True).start()
    gateway = None
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz", phoenix, "phoenix", STARTUP)
        agent = os.path.join(work, "agent.toml")
        with open(agent, "w") as f:
            f.write('name = "helper"\ninstruction = "Use your tools."\n[[http_tools]]\n'
                    f'name = "lookup"\ndescription = "lookup"\n'
                    f'url = "http://127.0.0.1:{tool.server_address[1]}/echo"\n')
        gw_port = free_port()
        gw_env = dict(os.environ, LIVEGATE_OTEL="true", OTEL_EXPORTER_OTLP_ENDPOINT=base,
                      OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="livegate-ci")
        gateway = subprocess.Popen(
            [gateway_bin, "--bind", f"127.0.0.1:{gw_port}", "--data-dir", work,
             "--session-store", "memory:", "--artifact-store", "memory:", "--sim-pacing", "burst",
             "--sim-reply-delay-ms", "0", "--agent", agent],
            env=gw_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{gw_port}/healthz", gateway, "livegate")
        asyncio.run(call(gw_port))

        deadline, spans = time.time() + WAIT, []
        while time.time() < deadline:
            spans = [s for s in phoenix_spans(base) if s["context"]["trace_id"] == TRACE_ID]
            names = {s["name"] for s in spans}
            if {"livegate.connection", "execute_tool lookup", "chat sim"} <= names:
                break
            time.sleep(0.5)
        by_name = {}
        for span in spans:
            span["attributes"] = flatten(span.get("attributes"))
            by_name.setdefault(span["name"], []).append(span)
        names = sorted(by_name)
        assert "livegate.connection" in by_name, names
        connection = by_name["livegate.connection"][0]
        assert connection.get("parent_id") == PARENT, connection
        invocation = by_name["invoke_agent helper"][0]
        assert invocation["parent_id"] == connection["context"]["span_id"], invocation
        assert invocation["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        turn = by_name["chat sim"][0]
        assert turn["parent_id"] == invocation["context"]["span_id"], turn
        assert turn["attributes"]["gen_ai.system"] == "livegate.sim", turn
        assert turn["attributes"]["gen_ai.request.model"] == "sim", turn
        assert int(turn["attributes"]["gen_ai.usage.input_tokens"]) > 0, turn
        assert int(turn["attributes"]["gen_ai.usage.output_tokens"]) > 0, turn
        tool_span = by_name["execute_tool lookup"][0]
        assert tool_span["parent_id"] == turn["context"]["span_id"], tool_span
        assert tool_span["attributes"]["gen_ai.tool.name"] == "lookup", tool_span
        model = by_name["connect sim"][0]
        assert model["parent_id"] == invocation["context"]["span_id"], model
        assert Tool.seen == [f"00-{TRACE_ID}-{tool_span['context']['span_id']}-01"], Tool.seen
        print(f"phoenix: {len(spans)} spans of the call read back: {', '.join(names)}")
    finally:
        for process in (gateway, phoenix):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        tool.shutdown()
        phoenix_log.close()
        if sys.exc_info()[0] is not None:
            with open(os.path.join(work, "phoenix.log")) as f:
                print("phoenix's log, its end:\n" + f.read()[-4000:], file=sys.stderr)


if __name__ == "__main__":
    main()
