// LiveSession: one live conversation with a livegate session over WebSocket (docs/PROTOCOL.md).
// It connects with a token, sends the live settings first, turns ADK events into typed events,
// joins binary audio frames to their events, reconnects to the same session with backoff, fills
// the gap a drop left from the stored events, never delivers an event twice, and stops retrying
// when retrying cannot help, saying why.

import { ApiError, GatewayApi, httpBase } from "./api.js";
import { base64ToBytes, bytesToBase64, hasAudio, audioMimeOf, sampleRateOf, typedEvents, fromUser } from "./events.js";
import { Backoff, afterClose, fatalStatus } from "./retry.js";
import { tokenClaims, tokenExpired } from "./token.js";

/** What the gateway accepts as a user or session id. */
export const ID_PATTERN = /^[A-Za-z0-9._:@-]{1,128}$/;
const SUBPROTOCOL = "livegate.v1";
const SEEN_MAX = 5000; // event ids remembered for de-duplication
const RESUME_PAGE = 100; // stored events read back after a reconnect
const RESUME_TIMEOUT_MS = 5000;
const HELD_MAX = 2000; // live events held while the gap is filled
const TOKEN_SKEW_S = 30; // a token function is asked again this long before its token expires

/** A new random session id (`s-` and 13 base-36 characters). */
export function newSessionId() {
  const [a, b] = crypto.getRandomValues(new Uint32Array(2));
  return "s-" + a.toString(36) + b.toString(36);
}

export class LiveSession {
  /** @param {import("./index.js").LiveSessionOptions} o */
  constructor(o) {
    if (!ID_PATTERN.test(o.userId || "")) throw new TypeError(`userId: 1–128 of A-Za-z0-9._:@- (got ${JSON.stringify(o.userId)})`);
    if (!ID_PATTERN.test(o.sessionId || "")) throw new TypeError(`sessionId: 1–128 of A-Za-z0-9._:@- (got ${JSON.stringify(o.sessionId)})`);
    this.userId = o.userId;
    this.sessionId = o.sessionId;
    this.url = httpBase(o.url);
    this.modality = o.modality === "TEXT" ? "TEXT" : "AUDIO";
    this.audioFrames = o.audio === "base64" ? "base64" : "binary";
    this.settings = { ...(o.settings || {}) };
    this.token = o.token ?? null;
    this.retry = o.reconnect === false ? null : { maxAttempts: Infinity, ...(o.reconnect || {}) };
    this.resume = o.resume !== false;
    this.WebSocket = o.WebSocket || globalThis.WebSocket;
    this.api = new GatewayApi({ url: this.url, token: () => this.currentToken(), fetch: o.fetch });
    this.backoff = new Backoff(this.retry || {});
    this.listeners = new Map();
    this.status = "idle";
    this.fatal = null;
    this.ws = null;
    this.generation = 0; // the current attempt; older sockets and timers see it changed
    this.timer = 0;
    this.openedAt = 0;
    this.everOpened = false;
    this.inTurn = false;
    this.lastError = null; // the last error event on the current socket
    this.pendingPcm = null; // a binary frame waiting for its event
    this.lastRate = 24000;
    this.seen = new Set();
    this.seenOrder = [];
    this.lastStoredId = null; // the newest non-partial event delivered
    this.held = null; // live events held while a reconnect's gap is filled
    this.cachedToken = null;
    this.refreshed = false; // a refused token was already replaced once since the last open
    this.waiters = [];
  }

  // ---- listeners ---------------------------------------------------------------------------

  /** Calls `fn` for each event of `type`; returns a function that stops it. */
  on(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, new Set());
    this.listeners.get(type).add(fn);
    return () => this.off(type, fn);
  }

  off(type, fn) {
    const set = this.listeners.get(type);
    if (set) set.delete(fn);
  }

  emit(type, payload) {
    const set = this.listeners.get(type);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(payload);
      } catch (error) {
        // A listener's bug is reported as the page's own error; the session goes on.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  setStatus(status, extra = {}) {
    this.status = status;
    this.emit("status", { status, ...extra });
  }

  // ---- tokens ------------------------------------------------------------------------------

  /** The token to present now: a string, or what the token function gives (cached until near its expiry). */
  async currentToken() {
    if (typeof this.token !== "function") return this.token || null;
    const cached = this.cachedToken;
    if (cached && !tokenExpired(tokenClaims(cached) || { sub: "" }, Date.now(), TOKEN_SKEW_S)) return cached;
    this.cachedToken = (await this.token()) || null;
    return this.cachedToken;
  }

  // ---- connecting --------------------------------------------------------------------------

  /** The WebSocket URL of this session. */
  wsUrl() {
    const query = new URLSearchParams({ modality: this.modality, audio: this.audioFrames });
    // Ids match ID_PATTERN, whose characters are all legal in a path segment: sent as they are.
    return `${this.url.replace(/^http/i, "ws")}/ws/${this.userId}/${this.sessionId}?${query}`;
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === 1;
  }

  /** Connects (again, after a close or a fatal error); resolves once open, rejects on a fatal error. */
  connect() {
    this.fatal = null;
    this.backoff.reset();
    this.refreshed = false;
    const opened = new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
    this.attempt();
    return opened;
  }

  /**
   * Reconnects now with a fresh backoff, e.g. with new settings (they only apply from a
   * connection's first message). An answer in progress ends: `turnAborted` says why.
   */
  reconnect({ settings, reason = "reconnect" } = {}) {
    if (settings) this.settings = { ...settings };
    this.abortTurn(reason);
    this.backoff.reset();
    this.fatal = null;
    this.attempt();
  }

  /** New live settings: reconnects with them (`turnAborted` with reason "settings" if mid-answer). */
  updateSettings(settings) {
    this.reconnect({ settings, reason: "settings" });
  }

  /** Closes for good (until `connect()`). */
  close() {
    this.generation += 1;
    this.dropSocket();
    this.abortTurn("closed");
    this.setStatus("closed");
  }

  dropSocket() {
    clearTimeout(this.timer);
    this.timer = 0;
    const ws = this.ws;
    this.ws = null;
    this.openedAt = 0;
    this.pendingPcm = null;
    this.held = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close(1000, "client closed");
      } catch {
        /* already closing */
      }
    }
  }

  async attempt() {
    this.dropSocket();
    const generation = ++this.generation;
    this.setStatus(this.everOpened ? "reconnecting" : "connecting");
    let token;
    try {
      token = await this.currentToken();
    } catch (error) {
      if (generation === this.generation) this.afterClose(generation, { code: 0, reason: `token: ${(error && error.message) || error}`, opened: false });
      return;
    }
    if (generation !== this.generation) return;
    const claims = typeof token === "string" ? tokenClaims(token) : null;
    if (claims && tokenExpired(claims) && typeof this.token !== "function") {
      this.fail({ kind: "unauthorized", code: "UNAUTHENTICATED", message: "the token has expired", hint: "Sign in again: the token has expired." }, 0, "");
      return;
    }
    let ws;
    try {
      ws = token ? new this.WebSocket(this.wsUrl(), [SUBPROTOCOL, `livegate.bearer.${token}`]) : new this.WebSocket(this.wsUrl());
    } catch (error) {
      this.afterClose(generation, { code: 0, reason: String((error && error.message) || error), opened: false });
      return;
    }
    ws.binaryType = "arraybuffer"; // binary frames are PCM: no Blob round trip
    this.ws = ws;
    this.lastError = null;
    ws.onopen = () => ws === this.ws && this.opened();
    ws.onmessage = (e) => ws === this.ws && this.frame(e.data);
    const closed = (code, reason) => {
      if (ws !== this.ws) return;
      const opened = this.openedAt !== 0;
      this.backoff.closed(this.openedAt, Date.now());
      this.ws = null;
      this.openedAt = 0;
      this.afterClose(generation, { code, reason, opened });
    };
    ws.onclose = (e) => closed(e.code, e.reason || "");
    // Once open, a close event follows with the details; before, some WebSockets (Node 20's)
    // report a refused connection with an error alone.
    ws.onerror = () => this.openedAt === 0 && closed(1006, "");
  }

  opened() {
    const reconnected = this.everOpened;
    this.everOpened = true;
    this.openedAt = Date.now();
    this.refreshed = false;
    // First, before any audio: the run starts with these settings, at once.
    this.sendJson({ type: "setup", ...this.settings });
    if (reconnected && this.resume && this.lastStoredId) this.fillGap(this.generation);
    this.setStatus("open");
    this.emit("open", { reconnected });
    for (const w of this.waiters.splice(0)) w.resolve();
  }

  async afterClose(generation, { code, reason, opened }) {
    if (this.pendingPcm) this.emitAudio(this.pendingPcm, this.lastRate, null);
    this.pendingPcm = null;
    this.held = null;
    this.abortTurn("dropped");
    let decision = afterClose({ code, reason, lastError: this.lastError });
    if (!opened && decision.retry === "backoff") {
      // A refused upgrade reaches a browser as 1006 with no status: ask the REST API why.
      const status = await this.probe();
      if (generation !== this.generation) return;
      if (status === 401 && typeof this.token === "function" && !this.refreshed) {
        this.refreshed = true;
        this.cachedToken = null;
        decision = { retry: "now", fatal: null };
      } else {
        const fatal = fatalStatus(status);
        if (fatal) decision = { retry: "never", fatal };
      }
    }
    if (!decision.fatal && (!this.retry || this.backoff.attempts >= this.retry.maxAttempts)) {
      decision = { retry: "never", fatal: { kind: "gaveUp", code: "UNAVAILABLE", message: `closed (${code})${reason ? ": " + reason : ""}`, hint: "The gateway could not be reached; try again later." } };
    }
    if (decision.fatal) {
      this.fail(decision.fatal, code, reason);
      return;
    }
    const delay = decision.retry === "now" ? this.backoff.soon() : this.backoff.next();
    this.setStatus("reconnecting", { retryInMs: delay });
    this.emit("close", { code, reason, retryInMs: delay, fatal: null });
    this.timer = setTimeout(() => {
      if (generation === this.generation) this.attempt();
    }, delay);
  }

  fail(fatal, code, reason) {
    this.fatal = fatal;
    this.setStatus("closed", { fatal });
    this.emit("close", { code, reason, retryInMs: null, fatal });
    this.emit("fatal", fatal);
    const error = Object.assign(new Error(`${fatal.kind}: ${fatal.message}`), { fatal });
    for (const w of this.waiters.splice(0)) w.reject(error);
  }

  /** The HTTP status the REST API gives this session's caller now (0: unreachable). */
  async probe() {
    try {
      await this.api.events(this.userId, this.sessionId, { offset: 0, limit: 1 });
      return 200;
    } catch (error) {
      return error instanceof ApiError ? error.status : 0;
    }
  }

  abortTurn(reason) {
    if (!this.inTurn) return;
    this.inTurn = false;
    this.emit("turnAborted", { reason });
  }

  // ---- downstream --------------------------------------------------------------------------

  frame(data) {
    if (typeof data !== "string") {
      // Binary: PCM whose event (with its rate) follows at once. A second frame first: play the
      // first at the last rate rather than drop it.
      if (this.pendingPcm) this.emitAudio(this.pendingPcm, this.lastRate, null);
      this.pendingPcm = data instanceof ArrayBuffer ? data : toArrayBuffer(data);
      return;
    }
    let ev;
    try {
      ev = JSON.parse(data);
    } catch {
      this.emit("error", { code: "CLIENT", message: "a text frame that is not JSON", event: null, fatal: null });
      return;
    }
    if (!ev || typeof ev !== "object") return;
    if (this.held) {
      if (this.held.length < HELD_MAX) {
        this.held.push(ev);
        return;
      }
    }
    this.deliver(ev, false);
  }

  /** Marks events as seen: they will not be delivered again (e.g. history the app shows). */
  markSeen(events) {
    for (const ev of events) {
      if (!ev || !ev.id) continue;
      this.remember(ev.id);
      if (ev.partial !== true) this.lastStoredId = ev.id;
    }
  }

  remember(id) {
    if (this.seen.has(id)) return;
    this.seen.add(id);
    this.seenOrder.push(id);
    if (this.seenOrder.length > SEEN_MAX) this.seen.delete(this.seenOrder.shift());
  }

  deliver(ev, replayed) {
    let pcm = null;
    if (this.pendingPcm) {
      pcm = this.pendingPcm;
      this.pendingPcm = null;
      if (!hasAudio(ev)) {
        this.emitAudio(pcm, this.lastRate, null);
        pcm = null;
      }
    }
    if (ev.id) {
      if (this.seen.has(ev.id)) return;
      this.remember(ev.id);
      if (ev.partial !== true) this.lastStoredId = ev.id;
    }
    if (ev.errorCode) this.lastError = { code: ev.errorCode, message: ev.errorMessage || "" };
    this.emit("event", { event: ev, replayed });
    if (pcm) {
      this.lastRate = sampleRateOf(audioMimeOf(ev), this.lastRate);
      this.emitAudio(pcm, this.lastRate, ev);
    }
    for (const t of typedEvents(ev)) {
      if (t.type === "audio") {
        this.lastRate = t.sampleRate;
        let bytes;
        try {
          bytes = base64ToBytes(t.data);
        } catch {
          this.emit("error", { code: "CLIENT", message: "base64 audio that does not decode", event: ev, fatal: null });
          continue;
        }
        this.emitAudio(bytes.buffer, t.sampleRate, ev);
        continue;
      }
      this.track(t);
      if (t.type === "error") this.emit("error", { ...t, fatal: null });
      else this.emit(t.type, replayed ? { ...t, replayed } : t);
    }
  }

  emitAudio(pcm, sampleRate, event) {
    if (!this.inTurn) {
      this.inTurn = true;
    }
    this.emit("audio", { type: "audio", pcm, sampleRate, event });
  }

  /** Whether an answer is in progress, for `turnAborted`. */
  track(t) {
    if (t.type === "interrupted" || t.type === "turnComplete") this.inTurn = false;
    else if ((t.type === "text" && !t.fromUser) || t.type === "outputTranscription" || t.type === "toolCall") this.inTurn = true;
  }

  /** After a reconnect: the stored events after the last one delivered, then the held live ones. */
  async fillGap(generation) {
    this.held = [];
    const last = this.lastStoredId;
    try {
      const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("timeout")), RESUME_TIMEOUT_MS));
      const read = (async () => {
        const { total } = await this.api.events(this.userId, this.sessionId, { offset: 0, limit: 1 });
        return this.api.events(this.userId, this.sessionId, { offset: Math.max(0, total - RESUME_PAGE), limit: RESUME_PAGE });
      })();
      const { events } = await Promise.race([read, timeout]);
      if (generation !== this.generation) return;
      const at = events.findIndex((e) => e.id === last);
      if (at >= 0) for (const ev of events.slice(at + 1)) this.deliver(ev, true);
    } catch {
      /* no gap filled: the live events go on */
    }
    if (generation !== this.generation || !this.held) return;
    const held = this.held;
    this.held = null;
    for (const ev of held) this.deliver(ev, false);
  }

  /** Loads the session's stored events (oldest first) and marks them seen: {events, total}. */
  async loadHistory({ max = 1000 } = {}) {
    const history = await this.api.history(this.userId, this.sessionId, { max });
    this.markSeen(history.events);
    return history;
  }

  // ---- upstream ----------------------------------------------------------------------------

  /** Sends one JSON message; false (nothing sent) when not connected. */
  sendJson(message) {
    if (!this.isOpen) return false;
    this.ws.send(JSON.stringify(message));
    this.emit("sent", { message });
    return true;
  }

  /** A complete user turn. */
  sendText(text) {
    return this.sendJson({ type: "text", text: String(text) });
  }

  /**
   * A realtime image: bytes, or base64 text.
   * @param {ArrayBuffer | Uint8Array | string} data
   */
  sendImage(data, mimeType = "image/jpeg") {
    const b64 = typeof data === "string" ? data : bytesToBase64(data instanceof Uint8Array ? data : new Uint8Array(data));
    return this.sendJson({ type: "image", data: b64, mimeType });
  }

  /** Microphone audio: PCM16 little-endian mono at 16 kHz, as one binary frame. */
  sendAudio(pcm) {
    if (!this.isOpen) return false;
    this.ws.send(pcm);
    return true;
  }

  /** Manual voice activity (with the `vad: false` setting): the user starts speaking. */
  activityStart() {
    return this.sendJson({ type: "activity_start" });
  }

  /** Manual voice activity: the user stopped speaking. */
  activityEnd() {
    return this.sendJson({ type: "activity_end" });
  }

  /** The microphone was muted or stopped: the model need not wait for more speech. */
  audioStreamEnd() {
    return this.sendJson({ type: "audio_stream_end" });
  }
}

function toArrayBuffer(data) {
  if (ArrayBuffer.isView(data)) return data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
  return data;
}


