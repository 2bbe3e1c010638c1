// LiveSession against the real gateway on `sim`: typed events, audio frames joined to their
// events, settings, reconnection after a drain, takeover, and the errors retrying cannot fix.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { LiveSession } from "../lib/index.js";
import { startGateway, startMockGemini, mintToken, next, record } from "./gateway.js";

const SECRET = "node-test-secret-0123456789abcdef0123";
const TYPES = ["status", "open", "close", "fatal", "event", "text", "audio", "inputTranscription", "outputTranscription", "toolCall", "toolResult", "usage", "interrupted", "turnComplete", "error", "recording", "turnAborted"];

function session(gw, options) {
  return new LiveSession({ url: gw.url, reconnect: { firstDelayMs: 100, maxDelayMs: 500 }, ...options });
}

test("a text turn: partial deltas, one final text, a tool call and its result, usage, turnComplete", async () => {
  const gw = await startGateway();
  try {
    const s = session(gw, { userId: "n1", sessionId: "text-1", modality: "TEXT" });
    const got = record(s, TYPES);
    await s.connect();
    assert.equal(s.status, "open");
    assert.ok(s.sendText("what time is it in Tokyo?"));
    await next(s, "turnComplete");
    assert.equal(got.toolCall.length, 1);
    assert.deepEqual(got.toolCall[0].args, { timezone: "Asia/Tokyo" });
    assert.equal(got.toolResult[0].name, "get_current_time");
    assert.equal(got.toolResult[0].response.timezone, "Asia/Tokyo");
    const partial = got.text.filter((t) => t.partial && !t.fromUser);
    const final = got.text.filter((t) => !t.partial && !t.fromUser);
    assert.ok(partial.length >= 2, "streamed in pieces");
    assert.equal(final.length, 1);
    assert.equal(partial.map((t) => t.text).join(""), final[0].text, "the deltas add up to the final text");
    assert.ok(got.usage[0].usage.totalTokenCount > 0);
    assert.equal(got.error.length, 0);
    const ids = got.event.map((e) => e.event.id).filter(Boolean);
    assert.equal(new Set(ids).size, ids.length, "no event twice");
    s.close();
    assert.equal(s.status, "closed");
  } finally {
    await gw.stop();
  }
});

test("spoken answers: binary frames and base64 both arrive as 24 kHz PCM with their events", async () => {
  const gw = await startGateway();
  try {
    for (const audio of ["binary", "base64"]) {
      const s = session(gw, { userId: "n2", sessionId: `voice-${audio}`, audio });
      const got = record(s, TYPES);
      await s.connect();
      s.sendText("hello there");
      await next(s, "turnComplete");
      assert.ok(got.audio.length > 3, `${audio}: audio chunks`);
      for (const a of got.audio) {
        assert.equal(a.sampleRate, 24000);
        assert.ok(a.pcm instanceof ArrayBuffer && a.pcm.byteLength > 0 && a.pcm.byteLength % 2 === 0);
        assert.ok(a.event, `${audio}: each chunk has its event`);
      }
      const said = got.outputTranscription.filter((t) => t.finished);
      assert.equal(said.length, 1, `${audio}: one finished transcription`);
      s.close();
    }
  } finally {
    await gw.stop();
  }
});

test("settings go first; a refused setting is an error event and the connection goes on", async () => {
  const gw = await startGateway();
  try {
    const s = session(gw, { userId: "n3", sessionId: "set-1", modality: "TEXT", settings: { voice: "Kore", save_live_blob: false } });
    const got = record(s, TYPES);
    const sent = [];
    s.on("sent", (m) => sent.push(m.message));
    await s.connect();
    assert.deepEqual(sent[0], { type: "setup", voice: "Kore", save_live_blob: false });
    const refused = await next(s, "error");
    assert.equal(refused.code, "INVALID_ARGUMENT");
    assert.match(refused.message, /save_live_blob/);
    s.sendText("still there?");
    await next(s, "turnComplete");
    assert.equal(s.status, "open");
    assert.equal(got.fatal.length, 0);
    // New settings reconnect at once; the same session goes on.
    s.updateSettings({ voice: "Puck" });
    await next(s, "open", (o) => o.reconnected);
    assert.deepEqual(sent.at(-1), { type: "setup", voice: "Puck" });
    s.close();
  } finally {
    await gw.stop();
  }
});

test("a drain (1012) reconnects within a second to the same session, and nothing is delivered twice", async () => {
  const dir = await mkdtemp(path.join(tmpdir(), "livegate-node-"));
  const store = `sqlite://${dir}/sessions.db`;
  const first = await startGateway({ "session-store": store });
  const port = first.addr.split(":")[1];
  let second = null;
  try {
    const s = session(first, { userId: "n4", sessionId: "drain-1", modality: "TEXT" });
    const got = record(s, TYPES);
    await s.connect();
    s.sendText("hello before the drain");
    await next(s, "turnComplete");
    const closed = next(s, "close");
    await first.stop();
    const close = await closed;
    assert.equal(close.code, 1012);
    assert.ok(close.retryInMs !== null && close.retryInMs <= 1000, `retry soon: ${close.retryInMs}`);
    assert.equal(s.status, "reconnecting");
    second = await startGateway({ bind: `127.0.0.1:${port}`, "session-store": store });
    await next(s, "open", (o) => o.reconnected, 15000);
    s.sendText("hello after the drain");
    await next(s, "turnComplete", () => true, 10000);
    const finals = got.text.filter((t) => !t.partial && !t.fromUser).map((t) => t.text);
    assert.equal(finals.length, 2, `${finals}`);
    const ids = got.event.map((e) => e.event.id).filter(Boolean);
    assert.equal(new Set(ids).size, ids.length, "no event twice");
    assert.equal(got.fatal.length, 0);
    s.close();
  } finally {
    await first.stop();
    if (second) await second.stop();
    await rm(dir, { recursive: true, force: true });
  }
});

test("a drop mid-answer ends the answer (turnAborted), reconnects, and delivers only events the app has not seen", async () => {
  const gw = await startGateway({ "sim-pacing": "realtime" });
  try {
    const s = session(gw, { userId: "n5", sessionId: "drop-1", modality: "TEXT" });
    const got = record(s, TYPES);
    await s.connect();
    s.sendText("tell me a long story about a lighthouse keeper please");
    await next(s, "text", (t) => t.partial && !t.fromUser);
    s.ws.close(); // the network drops (from this side)
    const aborted = await next(s, "turnAborted");
    assert.equal(aborted.reason, "dropped");
    await next(s, "open", (o) => o.reconnected);
    s.sendText("hello again");
    await next(s, "turnComplete", () => true, 15000);
    const ids = got.event.map((e) => e.event.id).filter(Boolean);
    assert.equal(new Set(ids).size, ids.length, "no event twice");
    // Events replayed from the store are ones the app had not seen, after the last it had.
    for (const e of got.event.filter((e) => e.replayed)) assert.ok(e.event.partial !== true);
    s.close();
  } finally {
    await gw.stop();
  }
});

test("after a reconnect, stored events the app missed are delivered once, in order, marked replayed", async () => {
  const gw = await startGateway();
  try {
    const a = session(gw, { userId: "n9", sessionId: "gap-1", modality: "TEXT" });
    await a.connect();
    for (const text of ["first question", "second question"]) {
      a.sendText(text);
      await next(a, "turnComplete");
    }
    a.close();
    const { events } = await a.api.history("n9", "gap-1");
    const cut = events.findIndex((e) => e.content && e.content.role === "user" && e.content.parts[0].text === "second question");
    assert.ok(cut > 0, "the second turn is stored");
    // An app that saw the session up to the second question, then lost its connection.
    const b = session(gw, { userId: "n9", sessionId: "gap-1", modality: "TEXT" });
    const got = record(b, TYPES);
    b.markSeen(events.slice(0, cut + 1));
    await b.connect();
    b.reconnect();
    await next(b, "open", (o) => o.reconnected);
    const missed = events.slice(cut + 1).map((e) => e.id);
    const deadline = Date.now() + 5000;
    while (got.event.length < missed.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(got.event.map((e) => e.event.id), missed);
    assert.ok(got.event.every((e) => e.replayed));
    assert.ok(got.text.some((t) => t.replayed && !t.fromUser && !t.partial), "the answer to the second question");
    // A second reconnect finds nothing new.
    b.reconnect();
    await next(b, "open", (o) => o.reconnected);
    b.sendText("third question");
    await next(b, "turnComplete");
    const ids = got.event.map((e) => e.event.id);
    assert.equal(new Set(ids).size, ids.length, "no event twice");
    b.close();
  } finally {
    await gw.stop();
  }
});

test("a second connection takes the session over: the first stops retrying and says why", async () => {
  const gw = await startGateway();
  try {
    const a = session(gw, { userId: "n6", sessionId: "tabs-1", modality: "TEXT" });
    await a.connect();
    const fatal = next(a, "fatal");
    const b = session(gw, { userId: "n6", sessionId: "tabs-1", modality: "TEXT" });
    await b.connect();
    const why = await fatal;
    assert.equal(why.kind, "takenOver");
    assert.equal(a.status, "closed");
    b.close();
  } finally {
    await gw.stop();
  }
});

test("with tokens: a bad token stops at once (unauthorized); a token function is asked again and recovers", async () => {
  const gw = await startGateway({ auth: "token" }, { LIVEGATE_TOKEN_SECRET: SECRET });
  try {
    const bad = session(gw, { userId: "n7", sessionId: "auth-1", modality: "TEXT", token: "not-a-token" });
    const got = record(bad, TYPES);
    await assert.rejects(bad.connect(), (e) => e.fatal.kind === "unauthorized");
    assert.equal(got.close.length, 1, "one attempt, no retry loop");
    assert.match(got.fatal[0].hint, /Sign in/);

    const good = await mintToken(SECRET, { sub: "n7" });
    let calls = 0;
    const s = session(gw, { userId: "n7", sessionId: "auth-1", modality: "TEXT", token: async () => (++calls === 1 ? "stale-token" : good) });
    await s.connect();
    assert.equal(calls, 2, "asked again after the refusal");
    s.sendText("hello with a token");
    await next(s, "turnComplete");
    const other = session(gw, { userId: "someone-else", sessionId: "auth-2", modality: "TEXT", token: good });
    await assert.rejects(other.connect(), (e) => e.fatal.kind === "forbidden");
    s.close();
  } finally {
    await gw.stop();
  }
});

test("a model that refuses the gateway's key: one error, no retry loop, the reason kept", async () => {
  const mock = await startMockGemini(["--api-key", "the-right-key"]);
  const gw = await startGateway({ model: "gemini-2.5-flash-native-audio-preview-12-2025", "gemini-base-url": mock.url }, { GEMINI_API_KEY: "a-wrong-key", GOOGLE_API_KEY: "" });
  try {
    const s = session(gw, { userId: "n8", sessionId: "key-1", modality: "TEXT" });
    const got = record(s, TYPES);
    s.connect().catch(() => {});
    const fatal = await next(s, "fatal", () => true, 15000);
    assert.equal(fatal.kind, "model");
    assert.match(fatal.message, /API key/i);
    assert.match(fatal.hint, /API key/);
    assert.equal(got.close.length, 1, "no retry loop");
    assert.equal(s.status, "closed");
  } finally {
    await gw.stop();
    await mock.stop();
  }
});
