"""Interop: livegate's MCP client against a server from the official Python SDK (`mcp` on PyPI),
tests/interop/mcp_server.py, over streamable HTTP and over stdio.

For each transport it runs the real gateway binary on sim with an agent file whose `[[mcp]]`
names the server, waits for /readyz (ready means the server is connected and listed), and
checks over the WebSocket that sim turns call the server's tools end to end: text, structured
content, a tool error (`isError`), and the caller's identity (user and session ids, and the
client token's claims) as the server sees it.

Usage: python tests/interop/mcp_python.py path/to/livegate
"""

import asyncio
import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests/interop/mcp_server.py"
TIMEOUT = 30
SECRET = "interop-token-secret-0123456789abcdef"
OPERATOR = "interop-operator-key-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, what):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def http(addr, path, body=None, key=None):
    request = urllib.request.Request(f"http://{addr}{path}", method="POST" if body else "GET",
                                     data=json.dumps(body).encode() if body else None)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def start_gateway(binary, agent_file, log):
    env = dict(os.environ, LIVEGATE_TOKEN_SECRET=SECRET, LIVEGATE_API_KEYS=OPERATOR, RUST_LOG="info")
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1:0", "--auth", "token", "--session-store", "memory:",
         "--artifact-store", "memory:", "--sim-pacing", "burst", "--sim-reply-delay-ms", "0",
         "--agent", str(agent_file)],
        stdout=subprocess.PIPE, stderr=log, text=True, env=env,
    )
    for line in proc.stdout:
        match = re.search(r"listening on http://(\S+)", line)
        if match:
            return proc, match.group(1)
    raise SystemExit("gateway did not start")


async def turn(addr, token, session, text):
    """The function call, function response and final text of one typed turn."""
    url = f"ws://{addr}/ws/ada/{session}?modality=TEXT&token={token}"
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "text", "text": text}))
        events = []
        while not (events and events[-1].get("turnComplete")):
            message = await asyncio.wait_for(ws.recv(), TIMEOUT)
            if isinstance(message, str):
                events.append(json.loads(message))
    parts = [p for e in events for p in (e.get("content") or {}).get("parts", [])]
    call = next((p["functionCall"] for p in parts if "functionCall" in p), None)
    response = next((p["functionResponse"] for p in parts if "functionResponse" in p), None)
    assert call is not None, f"{text!r}: no function call in {events}"
    assert response is not None, f"{text!r}: no function response in {events}"
    return call, response["response"]


async def exercise(addr, token, transport):
    call, response = await turn(addr, token, "s-py", "shout text=hello")
    assert call["name"] == "shout" and call["args"] == {"text": "hello"}, call
    assert response == {"result": "HELLO"}, response

    call, response = await turn(addr, token, "s-py", "weather city=Paris")
    assert response == {"result": {"city": "Paris", "celsius": 21.5}}, response

    call, response = await turn(addr, token, "s-py", "refuse reason=closed")
    assert set(response) == {"error"} and "refused: closed" in response["error"], response

    call, response = await turn(addr, token, "s-py", "whoami")
    who = json.loads(response["result"])
    assert who["meta_user"] == "ada" and who["meta_session"] == "s-py", who
    claims = who["meta_claims"]
    assert claims["sub"] == "ada" and claims["iss"] == "livegate", who
    if transport == "http":
        assert who["header_user"] == "ada" and who["header_session"] == "s-py", who
        header = who["header_claims"]
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
        assert decoded == claims, (decoded, claims)
    else:
        assert who["header_user"] is None, who


def agent_file(directory, transport, port):
    if transport == "http":
        server = f'url = "http://127.0.0.1:{port}/mcp"'
    else:
        server = f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(SERVER))}, \"stdio\"]"
    path = Path(directory) / f"agent-{transport}.toml"
    path.write_text(
        'name = "helper"\ninstruction = "Use your tools."\n\n'
        f'[[mcp]]\nname = "py_{transport}"\n{server}\nforward_identity = true\ntimeout_ms = 20000\n'
    )
    return path


def main():
    binary = sys.argv[1]
    port = free_port()
    http_server = subprocess.Popen([sys.executable, str(SERVER), "http", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: accepts(port) or http_server.poll() is not None, "the Python MCP server")
        assert http_server.poll() is None, "the Python MCP server exited"
        with tempfile.TemporaryDirectory() as directory:
            for transport in ("http", "stdio"):
                log_path = Path(directory) / f"gateway-{transport}.log"
                log = open(log_path, "w")
                proc, addr = start_gateway(binary, agent_file(directory, transport, port), log)
                try:
                    wait_until(lambda: http(addr, "/readyz")[0] == 200,
                               f"readiness with the {transport} server connected")
                    status, body = http(addr, "/api/tokens", {"userId": "ada", "sessionId": "s-py"},
                                        OPERATOR)
                    assert status == 200, body
                    token = json.loads(body)["token"]
                    asyncio.run(exercise(addr, token, transport))
                    print(f"{transport}: text, structured content, isError and identity over the WebSocket")
                except BaseException:
                    log.flush()
                    print(f"the gateway's log ({transport}):\n{log_path.read_text()[-8000:]}", file=sys.stderr)
                    raise
                finally:
                    proc.terminate()
                    proc.wait(timeout=TIMEOUT)
                    log.close()
    finally:
        http_server.terminate()
        http_server.wait(timeout=TIMEOUT)
    print("MCP interop with the official Python SDK: OK")


if __name__ == "__main__":
    main()
