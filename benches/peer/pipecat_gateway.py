"""Pipecat's live voice bot as its Twilio examples serve it, for the peer benchmark.

The Twilio chatbot example's shape: a FastAPI app whose voice webhook answers TwiML
`<Connect><Stream>` back to itself, and a WebSocket route that reads Twilio's `connected` and
`start` messages (`parse_telephony_websocket`) and runs one pipeline per call:

    transport.input() -> user aggregator -> GeminiLiveLLMService -> transport.output()
                                                                 -> assistant aggregator

with `FastAPIWebsocketTransport` and `TwilioFrameSerializer` (μ-law 8 kHz to 16 kHz PCM up, the
model's 24 kHz to μ-law 8 kHz down, both inside the serializer), Gemini Live answering in AUDIO
with both transcriptions and session resumption (the service's defaults), and one tool
(`get_current_time`) as livegate's sim agent has. No local VAD: Gemini's own (server-side) turn
detection ends utterances, as it does for ADK and livegate. No greeting: the first run frame only
hands the service its (empty) context, which opens the microphone's way upstream.

The model is Gemini through google-genai, pointed at `livegate mock-gemini` by PEER_UPSTREAM
(`https://127.0.0.1:PORT`, through the service's `http_options`); the key is GOOGLE_API_KEY and
the mock's certificate SSL_CERT_FILE.

Run: PEER_UPSTREAM=https://127.0.0.1:9300 GOOGLE_API_KEY=test-key SSL_CERT_FILE=cert.pem \
     uvicorn pipecat_gateway:app --port 8091
"""

import datetime
import os

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import HTMLResponse
from google.genai.types import HttpOptions
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import LLMRunFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.services.google.gemini_live.llm import GeminiLiveLLMService
from pipecat.services.llm_service import FunctionCallParams
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)
from pipecat.workers.runner import WorkerRunner

MODEL = os.environ.get("PEER_MODEL", "gemini-2.5-flash-native-audio-preview-12-2025")

# Pipecat logs every frame's lifecycle at DEBUG by default; a deployment runs at WARNING.
logger.remove()
logger.add(lambda message: print(message, end=""), level="WARNING")

app = FastAPI()


async def get_current_time(params: FunctionCallParams) -> None:
    await params.result_callback({"time": datetime.datetime.now().isoformat()})


time_tool = FunctionSchema(
    name="get_current_time",
    description="The current time.",
    properties={},
    required=[],
)


@app.post("/telephony/twilio/voice")
async def voice(request: Request) -> HTMLResponse:
    host = request.headers["host"]
    twiml = (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
        f'<Stream url="ws://{host}/telephony/twilio/stream"></Stream>'
        "</Connect></Response>"
    )
    return HTMLResponse(content=twiml, media_type="application/xml")


@app.websocket("/telephony/twilio/stream")
async def stream(websocket: WebSocket) -> None:
    await websocket.accept()
    _, call_data = await parse_telephony_websocket(websocket)
    serializer = TwilioFrameSerializer(
        stream_sid=call_data["stream_id"],
        call_sid=call_data["call_id"],
        # No Twilio account here: the call ends when the phone hangs up.
        params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
    )
    transport = FastAPIWebsocketTransport(
        websocket=websocket,
        params=FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            add_wav_header=False,
            serializer=serializer,
        ),
    )
    llm = GeminiLiveLLMService(
        api_key=os.environ["GOOGLE_API_KEY"],
        settings=GeminiLiveLLMService.Settings(model=f"models/{MODEL}", voice="Puck"),
        system_instruction="You are a helpful, concise voice assistant.",
        tools=ToolsSchema(standard_tools=[time_tool]),
        http_options=HttpOptions(base_url=os.environ["PEER_UPSTREAM"]),
    )
    llm.register_function("get_current_time", get_current_time)
    context = LLMContext()
    aggregators = LLMContextAggregatorPair(context)
    pipeline = Pipeline(
        [
            transport.input(),
            aggregators.user(),
            llm,
            transport.output(),
            aggregators.assistant(),
        ]
    )
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=16000, audio_out_sample_rate=8000),
    )

    @transport.event_handler("on_client_connected")
    async def on_client_connected(transport, client):
        await worker.queue_frames([LLMRunFrame()])

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport, client):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
