"""Interop: every event livegate sends parses as google-adk's Event and round-trips unchanged.

Runs the real gateway binary on 127.0.0.1 (any free port) with the sim model, drives text and
speech turns over a WebSocket in each audio mode, and checks each JSON event with
`google.adk.events.Event.model_validate_json`, then that `model_dump(exclude_none, by_alias)`
gives back exactly the JSON we sent (ADK's own serialization of it).

Usage: python tests/interop/adk_events.py path/to/livegate
"""

import asyncio
import json
import re
import subprocess
import sys
import urllib.request
import wave
from pathlib import Path

import websockets
from google.adk.events import Event

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30


def start_gateway(binary):
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1:0", "--session-store", "memory:", "--artifact-store", "memory:",
         "--sim-pacing", "burst", "--sim-reply-delay-ms", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    for line in proc.stdout:
        match = re.search(r"listening on http://(\S+)", line)
        if match:
            return proc, match.group(1)
    raise SystemExit("gateway did not start")


def check(raw, stats):
    event = Event.model_validate_json(raw)
    sent = json.loads(raw)
    again = json.loads(event.model_dump_json(exclude_none=True, by_alias=True))
    if sent != again:
        raise AssertionError(f"event does not round-trip through google-adk:\n sent  {sent}\n again {again}")
    for key in ("partial", "turnComplete", "interrupted", "inputTranscription", "outputTranscription", "usageMetadata"):
        if key in sent:
            stats[key] = stats.get(key, 0) + 1
    for part in (sent.get("content") or {}).get("parts", []):
        for key in ("functionCall", "functionResponse"):
            if key in part:
                stats[key] = stats.get(key, 0) + 1
    return sent


async def turn(url, frames, stats):
    async with websockets.connect(url, max_size=None) as ws:
        for frame in frames:
            await ws.send(frame)
        while True:
            message = await asyncio.wait_for(ws.recv(), TIMEOUT)
            if isinstance(message, bytes):
                stats["binary"] = stats.get("binary", 0) + 1
                continue
            event = check(message, stats)
            stats["events"] = stats.get("events", 0) + 1
            if event.get("turnComplete"):
                return


def speech_frames():
    with wave.open(str(ROOT / "tests/fixtures/hello.wav")) as clip:
        pcm = clip.readframes(clip.getnframes())
    pcm += b"\0" * 32000  # one second of silence closes the utterance
    return [pcm[i:i + 640] for i in range(0, len(pcm), 640)]


def post(addr, path, body):
    request = urllib.request.Request(f"http://{addr}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
        return reply.read().decode()


def turn_based(addr, stats):
    """POST /run: the ADK API server's request shape in, a list of ADK events out."""
    post(addr, "/apps/livegate/users/interop/sessions/run", {})
    events = json.loads(post(addr, "/run", {
        "appName": "livegate", "userId": "interop", "sessionId": "run",
        "newMessage": {"role": "user", "parts": [{"text": "what is 6 * 7"}]},
    }))
    for event in events:
        check(json.dumps(event), stats)
        stats["events"] = stats.get("events", 0) + 1
    stats["run"] = len(events)


async def main(binary):
    proc, addr = start_gateway(binary)
    stats = {}
    try:
        text = json.dumps({"type": "text", "text": "hello"})
        base = f"ws://{addr}/ws/interop"
        await turn(f"{base}/text?modality=TEXT", [text], stats)
        await turn(f"{base}/b64?modality=AUDIO&audio=base64", [text], stats)
        await turn(f"{base}/bin?modality=AUDIO&audio=binary", [text], stats)
        await turn(f"{base}/speech?audio=base64", speech_frames(), stats)
        tool = json.dumps({"type": "text", "text": "what time is it in Tokyo"})
        await turn(f"{base}/tool?modality=TEXT", [tool], stats)
        turn_based(addr, stats)
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)
    for needed in ("partial", "turnComplete", "inputTranscription", "outputTranscription", "usageMetadata", "binary",
                   "functionCall", "functionResponse", "run"):
        assert stats.get(needed), f"no {needed} event was exercised: {stats}"
    print(f"adk interop: {stats['events']} events parsed and round-tripped as google.adk Event ({stats})")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/debug/livegate")))
