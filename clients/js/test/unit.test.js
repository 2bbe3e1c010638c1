// The library's pure parts: close decisions, backoff, event typing, tokens, transcripts.

import { test } from "node:test";
import assert from "node:assert/strict";
import { afterClose, Backoff, fatalError, fatalStatus, typedEvents, transcript, transcriptToText, recordingOf, tokenClaims, tokenExpired, sampleRateOf, base64ToBytes, bytesToBase64 } from "../lib/index.js";

test("restarts reconnect soon, takeovers and policy closes never, model refusals never", () => {
  assert.equal(afterClose({ code: 1012 }).retry, "now");
  assert.equal(afterClose({ code: 1001 }).retry, "now");
  assert.equal(afterClose({ code: 1013 }).retry, "backoff", "try again later backs off");
  // A session store outage: the run could not take or keep its lease. Not a takeover, not final.
  const outage = afterClose({ code: 1013, reason: "session store unavailable; reconnect", lastError: { code: "UNAVAILABLE", message: "the session store is unreachable: the session's lease cannot be taken" } });
  assert.equal(outage.retry, "backoff", "a store outage reconnects");
  assert.equal(outage.fatal, null);
  assert.equal(afterClose({ code: 1006 }).retry, "backoff");
  assert.deepEqual(afterClose({ code: 4000, reason: "session taken over by a newer connection" }).fatal.kind, "takenOver");
  assert.equal(afterClose({ code: 1008, reason: "idle" }).fatal.kind, "policy");
  const refused = afterClose({ code: 1011, lastError: { code: "INVALID_ARGUMENT", message: "model closed the connection (code 1007): API key not valid." } });
  assert.equal(refused.retry, "never");
  assert.equal(refused.fatal.kind, "model");
  assert.match(refused.fatal.hint, /API key/);
  const openai = afterClose({ code: 1011, lastError: { code: "UNAVAILABLE", message: "openai refused the connection: HTTP 401 Unauthorized" } });
  assert.equal(openai.retry, "never");
  // A model that is only unavailable for now is retried; so is a drop after a bad client frame.
  assert.equal(afterClose({ code: 1011, lastError: { code: "UNAVAILABLE", message: "model reconnects exhausted" } }).retry, "backoff");
  assert.equal(afterClose({ code: 1006, lastError: { code: "INVALID_ARGUMENT", message: "setting \"x\": unknown" } }).retry, "backoff");
  assert.equal(fatalError(null), null);
  assert.equal(fatalStatus(401).kind, "unauthorized");
  assert.equal(fatalStatus(403).kind, "forbidden");
  assert.equal(fatalStatus(429), null);
  assert.equal(fatalStatus(503), null);
});

test("backoff doubles to its cap with jitter, and a healthy connection starts it over", () => {
  const b = new Backoff({ firstDelayMs: 500, maxDelayMs: 4000, random: () => 0.5 });
  assert.deepEqual([b.next(), b.next(), b.next(), b.next(), b.next()], [500, 1000, 2000, 4000, 4000]);
  assert.equal(b.attempts, 5);
  b.closed(1000, 1000 + 4999);
  assert.equal(b.next(), 4000, "a short connection does not reset it");
  b.closed(1000, 1000 + 5000);
  assert.equal(b.next(), 500);
  const low = new Backoff({ firstDelayMs: 1000, random: () => 0 });
  const high = new Backoff({ firstDelayMs: 1000, random: () => 0.999 });
  assert.equal(low.next(), 750);
  assert.equal(high.next(), 1250);
  assert.ok(new Backoff({ random: () => 0.999 }).soon() <= 1000);
});

test("one ADK event gives its typed events in order", () => {
  const ev = {
    id: "e1",
    author: "assistant",
    content: { role: "model", parts: [{ text: "It is " }, { text: "noon", thought: false }, { text: "hmm", thought: true }, { functionCall: { id: "c1", name: "get_current_time", args: { timezone: "Asia/Tokyo" } } }] },
    partial: true,
    usageMetadata: { totalTokenCount: 3 },
  };
  assert.deepEqual(typedEvents(ev).map((t) => t.type), ["text", "toolCall", "usage"]);
  const [text, call] = typedEvents(ev);
  assert.equal(text.text, "It is noon", "thoughts are not the answer");
  assert.equal(text.partial, true);
  assert.equal(call.name, "get_current_time");
  assert.deepEqual(typedEvents({ interrupted: true, turnComplete: true }).map((t) => t.type), ["interrupted", "turnComplete"]);
  assert.deepEqual(typedEvents({ interrupted: false, content: { parts: [{ text: "x" }] } }).map((t) => t.type), ["text"]);
  assert.deepEqual(typedEvents({ errorCode: "INVALID_ARGUMENT", errorMessage: "bad" })[0], { type: "error", code: "INVALID_ARGUMENT", message: "bad", event: { errorCode: "INVALID_ARGUMENT", errorMessage: "bad" } });
  const audio = typedEvents({ content: { parts: [{ inlineData: { mimeType: "audio/pcm;rate=16000", data: "AAE=" } }] } });
  assert.equal(audio[0].type, "audio");
  assert.equal(audio[0].sampleRate, 16000);
  assert.deepEqual(typedEvents({ content: { parts: [{ inlineData: { mimeType: "audio/pcm;rate=24000" } }] } }), [], "binary audio is joined by the session");
  const file = typedEvents({ content: { parts: [{ fileData: { fileUri: "artifact://livegate/u/s/_adk_live/adk_live_audio_storage_output_audio_1700000000123.pcm#2", mimeType: "audio/pcm" } }] } })[0];
  assert.deepEqual([file.type, file.side, file.at, file.version, file.name], ["recording", "output", 1700000000123, 2, "adk_live_audio_storage_output_audio_1700000000123.pcm"]);
  assert.deepEqual(typedEvents({ toolCallCancellation: { ids: ["c1"] } }).map((t) => [t.type, t.ids]), [["toolCancelled", ["c1"]]]);
  assert.deepEqual(typedEvents({ outputTranscription: { text: "hi", finished: true } })[0].finished, true);
});

test("transcripts keep finished text and speech, user and model", () => {
  const events = [
    { author: "user", content: { role: "user", parts: [{ text: "hello" }] }, timestamp: 1 },
    { author: "a", partial: true, content: { parts: [{ text: "Hi" }] } },
    { author: "a", content: { role: "model", parts: [{ text: "Hi there" }] }, timestamp: 2 },
    { author: "user", inputTranscription: { text: "[speech 1.00 s]", finished: true } },
    { author: "a", outputTranscription: { text: "You said", finished: false } },
    { author: "a", outputTranscription: { text: "You said something.", finished: true } },
  ];
  const lines = transcript(events);
  assert.deepEqual(lines.map((l) => [l.role, l.kind, l.text]), [
    ["user", "text", "hello"],
    ["model", "text", "Hi there"],
    ["user", "speech", "[speech 1.00 s]"],
    ["model", "speech", "You said something."],
  ]);
  assert.equal(transcriptToText(lines.slice(0, 2)), "You: hello\nAgent: Hi there\n");
});

test("helpers: rates, base64 both ways, recordings, token claims", () => {
  assert.equal(sampleRateOf("audio/pcm;rate=24000"), 24000);
  assert.equal(sampleRateOf("audio/pcm", 16000), 16000);
  assert.equal(sampleRateOf("audio/pcm;rate=1"), 24000);
  const bytes = new Uint8Array([0, 1, 2, 250, 251, 255]);
  assert.deepEqual(base64ToBytes(bytesToBase64(bytes)), bytes);
  assert.deepEqual(base64ToBytes("-_8"), new Uint8Array([251, 255]), "URL-safe, unpadded");
  assert.equal(recordingOf("notes.txt"), null);
  const claims = { sub: "u1", exp: 2000 };
  const jwt = `x.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.y`;
  assert.deepEqual(tokenClaims(jwt), claims);
  assert.equal(tokenClaims("not a token"), null);
  assert.equal(tokenExpired(claims, 1999_000), false);
  assert.equal(tokenExpired(claims, 2000_000), true);
  assert.equal(tokenExpired(claims, 1990_000, 30), true, "early by the skew");
});

test("a call the model does not wait for is a background one, and its result says its scheduling", () => {
  const call = { longRunningToolIds: ["c1"], content: { role: "model", parts: [{ functionCall: { id: "c1", name: "book", args: {} } }, { functionCall: { id: "c2", name: "lookup", args: {} } }] } };
  assert.deepEqual(typedEvents(call).map((t) => [t.id, t.background]), [["c1", true], ["c2", false]]);
  const result = { content: { role: "user", parts: [{ functionResponse: { id: "c1", name: "book", response: { ok: true }, scheduling: "WHEN_IDLE" } }] } };
  assert.equal(typedEvents(result)[0].scheduling, "WHEN_IDLE");
  const blocking = { content: { role: "user", parts: [{ functionResponse: { id: "c2", name: "lookup", response: {} } }] } };
  assert.equal(typedEvents(blocking)[0].scheduling, null);
});
