"""Interop: the official google-genai SDK holds a live session with `livegate mock-gemini`.

Starts the real binary on 127.0.0.1 (any free port) with the sim model, an API key and TLS (the
SDK always dials wss:// when it has an API key: it swaps the base URL's scheme for `wss`), then
uses `client.aio.live.connect` exactly as an application would: AUDIO modality, both
transcriptions and session resumption; a text turn with `send_client_content`, and a spoken turn
(tests/fixtures/hello.wav plus one second of silence, in 100 ms chunks) with `send_realtime_input`.

Usage: python tests/interop/genai_live.py path/to/livegate
"""

import asyncio
import os
import re
import ssl
import subprocess
import sys
import threading
import wave
from pathlib import Path

from google import genai
from google.genai import types

ROOT = Path(__file__).resolve().parents[2]
CERT = ROOT / "tests/fixtures/tls/cert.pem"
KEY = ROOT / "tests/fixtures/tls/key.pem"
MODEL = "gemini-2.5-flash-native-audio-preview-12-2025"
API_KEY = "test-key"
TIMEOUT = 30


def start_mock(binary):
    proc = subprocess.Popen(
        [binary, "mock-gemini", "--port", "0", "--sim-pacing", "burst", "--sim-reply-delay-ms", "0",
         "--api-key", API_KEY, "--tls-cert", str(CERT), "--tls-key", str(KEY)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    for line in proc.stdout:
        match = re.search(r"mock-gemini listening on wss://(\S+)", line)
        if match:
            # Keep reading what it prints, so a full pipe never blocks it.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, match.group(1)
    raise SystemExit("mock-gemini did not start")


def speech_chunks():
    with wave.open(str(ROOT / "tests/fixtures/hello.wav")) as clip:
        pcm = clip.readframes(clip.getnframes())
    pcm += b"\0" * 32000  # one second of silence closes the utterance
    return [pcm[i:i + 3200] for i in range(0, len(pcm), 3200)]


async def receive_turn(session):
    """Everything the server sends up to and including turn_complete."""
    seen = {"audio": 0, "input": "", "output": "", "turn_complete": False, "usage": False, "handles": 0}

    async def collect():
        async for message in session.receive():
            if message.session_resumption_update and message.session_resumption_update.new_handle:
                seen["handles"] += 1
            if message.usage_metadata:
                seen["usage"] = True
            content = message.server_content
            if not content:
                continue
            for part in (content.model_turn.parts or []) if content.model_turn else []:
                if part.inline_data and part.inline_data.data:
                    seen["audio"] += len(part.inline_data.data)
            if content.input_transcription and content.input_transcription.text:
                seen["input"] += content.input_transcription.text
            if content.output_transcription and content.output_transcription.text:
                seen["output"] += content.output_transcription.text
            if content.turn_complete:
                seen["turn_complete"] = True
                return

    await asyncio.wait_for(collect(), TIMEOUT)
    return seen


async def main(binary):
    proc, addr = start_mock(binary)
    try:
        tls = ssl.create_default_context(cafile=str(CERT))
        client = genai.Client(
            api_key=API_KEY,
            http_options={"base_url": f"https://{addr}", "api_version": "v1beta",
                          "async_client_args": {"ssl": tls}},
        )
        config = types.LiveConnectConfig(
            response_modalities=[types.Modality.AUDIO],
            input_audio_transcription=types.AudioTranscriptionConfig(),
            output_audio_transcription=types.AudioTranscriptionConfig(),
            session_resumption=types.SessionResumptionConfig(),
        )
        async with client.aio.live.connect(model=MODEL, config=config) as session:
            await session.send_client_content(
                turns=types.Content(role="user", parts=[types.Part(text="Hello there")]), turn_complete=True)
            text = await receive_turn(session)
            assert text["turn_complete"] and text["usage"], text
            assert text["audio"] > 0, f"no audio for the text turn: {text}"
            assert "Hello there" in text["output"], f"output transcription: {text}"

            for chunk in speech_chunks():
                await session.send_realtime_input(audio=types.Blob(data=chunk, mime_type="audio/pcm;rate=16000"))
            speech = await receive_turn(session)
            assert speech["turn_complete"], speech
            assert speech["input"], f"no input transcription: {speech}"
            assert speech["output"], f"no output transcription: {speech}"
            assert speech["audio"] > 0, f"no audio for the spoken turn: {speech}"
            # The handle after the text turn arrives at the start of the spoken turn.
            assert text["handles"] + speech["handles"] >= 1, "no session resumption handle"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"genai_live: ok: google-genai connected over wss with an API key; "
          f"text turn {text['audio']} audio bytes, said {text['output'].strip()!r}; "
          f"spoken turn heard {speech['input'].strip()!r}, {speech['audio']} audio bytes, "
          f"said {speech['output'].strip()!r}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1]))
