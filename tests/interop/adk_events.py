"""Interop: every event livegate sends parses as google-adk's Event and round-trips unchanged,
and has the same JSON fields as the event ADK itself makes from the same upstream content.

Runs the real gateway binary on 127.0.0.1 (any free port) with the sim model, drives text and
speech turns over a WebSocket in each audio mode, and checks each JSON event with
`google.adk.events.Event.model_validate_json`, then that `model_dump(exclude_none, by_alias)`
gives back exactly the JSON we sent (ADK's own serialization of it).

Then puts livegate and ADK's own runner (`Runner.run_live`, its Gemini model on google-genai) each
in front of a `livegate mock-gemini` with the same settings, plays them the same turns, and checks
that the two gave events with the same sets of JSON fields (every path of keys, values aside): the
role left out of partial output, the flags, usage, transcriptions, recordings and tool events.

Usage: python tests/interop/adk_events.py path/to/livegate
"""

import asyncio
import json
import os
import re
import ssl
import subprocess
import sys
import threading
import urllib.request
import wave
from pathlib import Path

import websockets
from google import genai
from google.adk.agents import Agent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig
from google.adk.artifacts import InMemoryArtifactService
from google.adk.events import Event
from google.adk.models import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30
CERT = ROOT / "tests/fixtures/tls/cert.pem"
KEY = ROOT / "tests/fixtures/tls/key.pem"
API_KEY = "test-key"
# ADK treats Gemini 2.5 and 3.x differently (3.x: tool calls at once, an empty groundingMetadata on
# turnComplete, the input transcript final at once). The sim, like 3.x, sends a tool call without
# ending the turn, which ADK on 2.5 waits for; so tools are compared on 3.x.
MODEL_25 = "gemini-2.5-flash-native-audio-preview-12-2025"
MODEL_3 = "gemini-3.1-flash-live-preview"


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


def spawn(binary, args, pattern):
    """Starts the binary; returns it and the first match of `pattern` in what it prints."""
    proc = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "RUST_LOG": "warn"})
    for line in proc.stdout:
        match = re.search(pattern, line)
        if match:
            # Keep reading what it prints, so a full pipe never blocks it.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, match.group(1)
    raise SystemExit(f"{args[0]} did not start")


def get_current_time(timezone: str) -> dict:
    """Gets the current time in an IANA time zone (ADK's side of the tool turn)."""
    return {"timezone": timezone, "time": "12:00"}


def field_paths(value, prefix=""):
    """Every key path of a JSON value (`content.parts[].text`), values aside."""
    paths = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            paths |= field_paths(inner, path)
    elif isinstance(value, list):
        for inner in value:
            paths |= field_paths(inner, prefix + "[]")
    return paths


def speech_inputs():
    return [("audio", frame) for frame in speech_frames()]


async def adk_turn(runner, session_id, modality, inputs):
    """ADK's events for one turn, as its own gateway (bidi-demo) would serialize them."""
    await runner.session_service.create_session(app_name="livegate", user_id="u", session_id=session_id)
    queue = LiveRequestQueue()
    for kind, data in inputs:
        if kind == "text":
            queue.send_content(types.Content(role="user", parts=[types.Part(text=data)]))
        else:
            queue.send_realtime(types.Blob(data=data, mime_type="audio/pcm;rate=16000"))
    transcription = types.AudioTranscriptionConfig()
    config = RunConfig(response_modalities=[modality], save_live_blob=True,
                       input_audio_transcription=transcription,
                       output_audio_transcription=transcription if modality == "AUDIO" else None)
    events = []
    stream = runner.run_live(user_id="u", session_id=session_id, live_request_queue=queue, run_config=config)

    async def collect():
        async for event in stream:
            events.append(json.loads(event.model_dump_json(exclude_none=True, by_alias=True)))
            if events[-1].get("turnComplete"):
                return

    try:
        await asyncio.wait_for(collect(), TIMEOUT)
    finally:
        queue.close()
        await stream.aclose()
    return events


async def livegate_turn(addr, session_id, modality, inputs):
    """livegate's events for the same turn (base64 audio, so audio events are whole JSON)."""
    events = []
    async with websockets.connect(f"ws://{addr}/ws/u/{session_id}?modality={modality}&audio=base64",
                                  max_size=None) as ws:
        for kind, data in inputs:
            await ws.send(json.dumps({"type": "text", "text": data}) if kind == "text" else data)
        while not (events and events[-1].get("turnComplete")):
            message = await asyncio.wait_for(ws.recv(), TIMEOUT)
            if isinstance(message, str):
                events.append(json.loads(message))
    return events


async def same_fields_as_adk(binary, model):
    """livegate and ADK, each in front of mock-gemini: the same field sets for the same turns."""
    sim = ["--sim-pacing", "burst", "--sim-reply-delay-ms", "0"]
    # google-genai dials wss:// when it has a key; livegate's client gets a plain twin.
    adk_mock, adk_addr = spawn(binary, ["mock-gemini", "--port", "0", *sim, "--api-key", API_KEY,
                                        "--tls-cert", str(CERT), "--tls-key", str(KEY)],
                               r"listening on wss://(\S+)")
    procs = [adk_mock]
    try:
        mock, mock_addr = spawn(binary, ["mock-gemini", "--port", "0", *sim], r"listening on ws://(\S+)")
        procs.append(mock)
        gateway, addr = spawn(binary, ["--bind", "127.0.0.1:0", "--session-store", "memory:",
                                       "--artifact-store", "memory:", "--model", model,
                                       "--gemini-base-url", f"ws://{mock_addr}"],
                              r"listening on http://(\S+)")
        procs.append(gateway)
        client = genai.Client(api_key=API_KEY, http_options={
            "base_url": f"https://{adk_addr}", "api_version": "v1beta",
            "async_client_args": {"ssl": ssl.create_default_context(cafile=str(CERT))}})
        agent = Agent(name="assistant", model=Gemini(model=model, client=client),
                      instruction="You are a helpful assistant.", tools=[get_current_time])
        runner = Runner(app_name="livegate", agent=agent, session_service=InMemorySessionService(),
                        artifact_service=InMemoryArtifactService())
        turns = [("text-audio", "AUDIO", [("text", "Hello there")]),
                 ("text-text", "TEXT", [("text", "Hello there")]),
                 ("speech", "AUDIO", speech_inputs())]
        if model == MODEL_3:
            turns.append(("tool", "TEXT", [("text", "what time is it in Tokyo")]))
        counts = {}
        for name, modality, inputs in turns:
            adk = await adk_turn(runner, name, modality, inputs)
            ours = await livegate_turn(addr, name, modality, inputs)
            # A tool's result is the tool's own JSON, not the runtime's; a state delta's keys are
            # the application's state (livegate keeps its usage totals there), not the schema.
            shape = lambda e: frozenset(p for p in field_paths(e)
                                        if not p.startswith("content.parts[].functionResponse.response.")
                                        and not p.startswith("actions.stateDelta."))
            adk_shapes, our_shapes = {shape(e) for e in adk}, {shape(e) for e in ours}
            if adk_shapes != our_shapes:
                only_adk = [sorted(s) for s in adk_shapes - our_shapes]
                only_ours = [sorted(s) for s in our_shapes - adk_shapes]
                raise AssertionError(f"{model} {name}: events with fields only ADK gives: {only_adk}; "
                                     f"only livegate gives: {only_ours}")
            counts[name] = (len(ours), len(adk))
        return counts
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=TIMEOUT)


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
    for model in (MODEL_25, MODEL_3):
        counts = await same_fields_as_adk(binary, model)
        print(f"adk interop: {model}: the same field sets as ADK's own events, per turn "
              f"(livegate events, ADK events): {counts}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/debug/livegate")))
