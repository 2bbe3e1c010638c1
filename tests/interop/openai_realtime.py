"""Interop: the official `openai` Python SDK's realtime client holds a session with `livegate mock-openai`.

Starts the real binary on 127.0.0.1 (any free port) with the sim model and an API key, points the
SDK at it with OPENAI_BASE_URL / OPENAI_API_KEY as an application would, and uses
`client.realtime.connect` (GA event names): `session.update` with audio out, input transcription,
server VAD and one tool; a text turn; a spoken turn (tests/fixtures/hello.wav resampled to 24 kHz,
plus one second of silence, in 100 ms appends); and a tool call answered with a
`function_call_output` and `response.create`. Every server event is parsed by the SDK's own types.

Usage: python tests/interop/openai_realtime.py path/to/livegate
"""

import array
import asyncio
import base64
import os
import re
import subprocess
import sys
import threading
import wave
from pathlib import Path

import openai
from openai import AsyncOpenAI

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gpt-realtime"
API_KEY = "sk-interop-test"
TIMEOUT = 30
TOOL = {
    "type": "function",
    "name": "get_current_time",
    "description": "The current time in a timezone.",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}},
}


def start_mock(binary):
    proc = subprocess.Popen(
        [binary, "mock-openai", "--port", "0", "--sim-pacing", "burst", "--sim-reply-delay-ms", "0",
         "--api-key", API_KEY],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    for line in proc.stdout:
        match = re.search(r"mock-openai listening on ws://(\S+)", line)
        if match:
            # Keep reading what it prints, so a full pipe never blocks it.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, match.group(1)
    raise SystemExit("mock-openai did not start")


def speech_chunks():
    """hello.wav (16 kHz) upsampled to 24 kHz by linear interpolation, one second of silence after."""
    with wave.open(str(ROOT / "tests/fixtures/hello.wav")) as clip:
        pcm = array.array("h", clip.readframes(clip.getnframes()))
    out = array.array("h")
    for i in range(len(pcm) * 3 // 2):
        pos = i * 2 / 3
        j = int(pos)
        a, b = pcm[j], pcm[min(j + 1, len(pcm) - 1)]
        out.append(int(a + (b - a) * (pos - j)))
    data = out.tobytes() + b"\0" * 48000
    return [data[i:i + 4800] for i in range(0, len(data), 4800)]


async def until_done(connection):
    """Events up to and including response.done, summed up."""
    seen = {"types": [], "audio": 0, "text": "", "transcript": "", "heard": "", "calls": [], "status": None}

    async def collect():
        async for event in connection:
            seen["types"].append(event.type)
            if event.type == "error":
                raise AssertionError(f"error event: {event.error}")
            if event.type == "response.output_audio.delta":
                seen["audio"] += len(base64.b64decode(event.delta))
            elif event.type == "response.output_text.delta":
                seen["text"] += event.delta
            elif event.type == "response.output_audio_transcript.delta":
                seen["transcript"] += event.delta
            elif event.type == "conversation.item.input_audio_transcription.completed":
                seen["heard"] = event.transcript
            elif event.type == "response.function_call_arguments.done":
                seen["calls"].append(event)
            elif event.type == "response.done":
                seen["status"] = event.response.status
                seen["usage"] = event.response.usage
                return

    await asyncio.wait_for(collect(), TIMEOUT)
    return seen


async def main(binary):
    proc, addr = start_mock(binary)
    os.environ["OPENAI_BASE_URL"] = f"http://{addr}/v1"
    os.environ["OPENAI_API_KEY"] = API_KEY
    try:
        client = AsyncOpenAI()
        async with client.realtime.connect(model=MODEL) as connection:
            created = await asyncio.wait_for(connection.recv(), TIMEOUT)
            assert created.type == "session.created", created
            await connection.session.update(session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "instructions": "You are a test.",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": "gpt-4o-mini-transcribe"},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"},
                },
                "tools": [TOOL],
            })
            updated = await asyncio.wait_for(connection.recv(), TIMEOUT)
            assert updated.type == "session.updated", updated
            assert updated.session.audio.output.voice == "marin", updated

            # A text turn.
            await connection.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello there"}],
            })
            await connection.response.create()
            text = await until_done(connection)
            assert text["status"] == "completed", text
            assert text["audio"] > 0, f"no audio for the text turn: {text}"
            assert "Hello there" in text["transcript"], text
            assert text["usage"].output_tokens > 0, text

            # A spoken turn: server VAD ends it and answers by itself.
            for chunk in speech_chunks():
                await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            speech = await until_done(connection)
            assert "input_audio_buffer.speech_stopped" in speech["types"], speech["types"]
            assert speech["heard"], f"no input transcription: {speech['types']}"
            assert speech["audio"] > 0 and speech["transcript"], speech

            # A tool call, answered with its output and a new response.
            await connection.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What time is it in Tokyo?"}],
            })
            await connection.response.create()
            called = await until_done(connection)
            assert len(called["calls"]) == 1, called
            call = called["calls"][0]
            assert call.name == "get_current_time", call
            await connection.conversation.item.create(item={
                "type": "function_call_output", "call_id": call.call_id,
                "output": '{"time": "14:03", "timezone": "Asia/Tokyo"}',
            })
            await connection.response.create()
            answer = await until_done(connection)
            assert "14:03" in answer["transcript"], answer
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"openai_realtime: ok: openai {openai.__version__} realtime client; text turn "
          f"{text['audio']} audio bytes; heard {speech['heard']!r}; tool {call.name} answered "
          f"{answer['transcript'].strip()!r}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1]))
