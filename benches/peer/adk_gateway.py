"""ADK Python's live gateway as its bidi-demo sample serves it, for the peer benchmark.

A FastAPI WebSocket route at /ws/{user_id}/{session_id} in front of ADK's `Runner.run_live`, with
the demo's choices: an in-memory session service, a session made on first use, a fresh
`LiveRequestQueue` per connection, AUDIO responses with both transcriptions and session
resumption, binary frames as 16 kHz PCM `send_realtime`, `{"type":"text"}` as `send_content`, and
each ADK event sent as one JSON text frame (`model_dump_json(exclude_none=True, by_alias=True)`,
audio base64 inside it). No tools: the benchmark's turns are spoken and need none.

The model is Gemini through google-genai, pointed at `livegate mock-gemini` by PEER_UPSTREAM
(`https://127.0.0.1:PORT`); the key is GOOGLE_API_KEY and the mock's certificate SSL_CERT_FILE,
which google-genai reads for its WebSocket's TLS.

Run: PEER_UPSTREAM=https://127.0.0.1:9300 GOOGLE_API_KEY=test-key SSL_CERT_FILE=cert.pem \
     uvicorn adk_gateway:app --port 8090
"""

import asyncio
import json
import logging
import os

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from google.adk.agents import Agent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models.google_llm import Gemini
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

APP_NAME = "peer-benchmark"
MODEL = os.environ.get("PEER_MODEL", "gemini-2.5-flash-native-audio-preview-12-2025")

logging.basicConfig(level=logging.WARNING)

agent = Agent(
    name="assistant",
    model=Gemini(model=MODEL, base_url=os.environ["PEER_UPSTREAM"]),
    instruction="You are a helpful, concise voice assistant.",
)
session_service = InMemorySessionService()
runner = Runner(app_name=APP_NAME, agent=agent, session_service=session_service)
app = FastAPI()


@app.websocket("/ws/{user_id}/{session_id}")
async def live(websocket: WebSocket, user_id: str, session_id: str) -> None:
    await websocket.accept()
    run_config = RunConfig(
        streaming_mode=StreamingMode.BIDI,
        response_modalities=["AUDIO"],
        input_audio_transcription=types.AudioTranscriptionConfig(),
        output_audio_transcription=types.AudioTranscriptionConfig(),
        session_resumption=types.SessionResumptionConfig(),
    )
    session = await session_service.get_session(
        app_name=APP_NAME, user_id=user_id, session_id=session_id
    )
    if session is None:
        await session_service.create_session(
            app_name=APP_NAME, user_id=user_id, session_id=session_id
        )
    queue = LiveRequestQueue()

    async def upstream() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                blob = types.Blob(mime_type="audio/pcm;rate=16000", data=message["bytes"])
                queue.send_realtime(blob)
            elif message.get("text") is not None:
                request = json.loads(message["text"])
                if request.get("type") == "text":
                    queue.send_content(types.Content(parts=[types.Part(text=request["text"])]))

    async def downstream() -> None:
        async for event in runner.run_live(
            user_id=user_id,
            session_id=session_id,
            live_request_queue=queue,
            run_config=run_config,
        ):
            await websocket.send_text(event.model_dump_json(exclude_none=True, by_alias=True))

    tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except WebSocketDisconnect:
        pass
    finally:
        queue.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
