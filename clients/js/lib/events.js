// ADK events (docs/PROTOCOL.md, "Gateway → client") as typed events: one ADK event may carry
// several (text and a tool call, a transcription and usage). Pure, so stored history is read the
// same way as live events.

const RECORDING = /(?:^|\/)adk_live_audio_storage_(input|output)_audio_(\d+)\.pcm(?:#(\d+))?$/;
const AUDIO_MIME = /^audio\//i;

/** The `rate=` of a mime type such as `audio/pcm;rate=24000`, or `fallback`. */
export function sampleRateOf(mimeType, fallback = 24000) {
  const match = /(?:^|;)\s*rate=(\d+)/i.exec(mimeType || "");
  const rate = match ? Number(match[1]) : NaN;
  return rate >= 3000 && rate <= 768000 ? rate : fallback;
}

/** Base64 (standard or URL-safe, padded or not) to bytes. */
export function base64ToBytes(text) {
  let s = String(text).replace(/[\s=]/g, "").replace(/-/g, "+").replace(/_/g, "/");
  if (s.length % 4) s += "=".repeat(4 - (s.length % 4));
  const raw = atob(s);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

/** Bytes to standard base64. */
export function bytesToBase64(bytes) {
  let raw = "";
  for (let i = 0; i < bytes.length; i += 0x8000) raw += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(raw);
}

/**
 * A recording's name or `artifact://` URI read as ADK's live recordings are named:
 * {name, side: "input"|"output", at (ms since the epoch), version} or null for another artifact.
 */
export function recordingOf(uri) {
  const match = RECORDING.exec(String(uri || ""));
  if (!match) return null;
  const name = String(uri).split("#")[0].split("/").pop();
  return { name, side: match[1], at: Number(match[2]), version: match[3] === undefined ? null : Number(match[3]) };
}

const partsOf = (ev) => (ev && ev.content && Array.isArray(ev.content.parts) ? ev.content.parts : []);

/** True when the event is the user's (typed text echoed back, or their transcription). */
export function fromUser(ev) {
  return ev.author === "user" || (ev.content && ev.content.role === "user");
}

/**
 * The typed events in one ADK event, in the order an app should apply them. Audio inside the
 * JSON (base64) comes as `audio` with its bytes; audio that came as a binary frame is joined to
 * its event by LiveSession, not here (`audio` events without bytes are left out).
 * @param {any} ev  an ADK event
 * @returns {Array<object>}
 */
export function typedEvents(ev) {
  const out = [];
  if (!ev || typeof ev !== "object") return out;
  const event = ev;
  if (ev.errorCode || ev.errorMessage) {
    out.push({ type: "error", code: ev.errorCode || "UNKNOWN", message: ev.errorMessage || "", event });
  }
  const parts = partsOf(ev);
  const user = fromUser(ev);
  // Thoughts are the model's reasoning, not its answer.
  const texts = parts.filter((p) => typeof p.text === "string" && p.thought !== true);
  if (texts.length) {
    out.push({ type: "text", text: texts.map((p) => p.text).join(""), partial: ev.partial === true, author: ev.author || "", fromUser: user, event });
  }
  for (const p of parts) {
    const blob = p.inlineData;
    if (blob && AUDIO_MIME.test(blob.mimeType || "") && typeof blob.data === "string" && blob.data) {
      out.push({ type: "audio", data: blob.data, sampleRate: sampleRateOf(blob.mimeType), event });
    }
    if (p.functionCall) {
      const c = p.functionCall;
      // A call the model does not wait for (a non-blocking or long-running tool) runs in the background.
      const background = Boolean(c.id) && Array.isArray(ev.longRunningToolIds) && ev.longRunningToolIds.includes(c.id);
      out.push({ type: "toolCall", id: c.id || null, name: c.name || "", args: c.args && typeof c.args === "object" ? c.args : {}, background, event });
    }
    if (p.functionResponse) {
      const r = p.functionResponse;
      out.push({ type: "toolResult", id: r.id || null, name: r.name || "", response: r.response, scheduling: r.scheduling || null, event });
    }
    if (p.fileData) {
      const uri = p.fileData.fileUri || "";
      const rec = recordingOf(uri);
      out.push({ type: "recording", uri, mimeType: p.fileData.mimeType || "", name: rec ? rec.name : uri.split("#")[0].split("/").pop(), side: rec ? rec.side : null, at: rec ? rec.at : null, version: rec ? rec.version : null, event });
    }
  }
  const cancelled = toolCancellation(ev);
  if (cancelled) out.push({ type: "toolCancelled", ids: cancelled, event });
  for (const [key, type] of [["inputTranscription", "inputTranscription"], ["outputTranscription", "outputTranscription"]]) {
    const t = ev[key];
    if (t && typeof t === "object") out.push({ type, text: typeof t.text === "string" ? t.text : "", finished: t.finished === true, event });
  }
  if (ev.usageMetadata) out.push({ type: "usage", usage: ev.usageMetadata, event });
  // Merged text may carry `interrupted: false`; only `true` is a barge-in.
  if (ev.interrupted === true) out.push({ type: "interrupted", event });
  if (ev.turnComplete === true) out.push({ type: "turnComplete", reason: ev.turnCompleteReason || null, event });
  return out;
}

/** The ids of tool calls an event cancels (Gemini's `toolCallCancellation`, as the gateway passes it on). */
function toolCancellation(ev) {
  const c = ev.toolCallCancellation || (ev.customMetadata && ev.customMetadata.toolCallCancellation);
  if (c && Array.isArray(c.ids)) return c.ids.map(String);
  return null;
}

/** True when an ADK event carries model audio (inline, or announced after a binary frame). */
export function hasAudio(ev) {
  return partsOf(ev).some((p) => p.inlineData && AUDIO_MIME.test(p.inlineData.mimeType || ""));
}

/** The audio mime type of an event's first audio part, or null. */
export function audioMimeOf(ev) {
  const part = partsOf(ev).find((p) => p.inlineData && AUDIO_MIME.test(p.inlineData.mimeType || ""));
  return part ? part.inlineData.mimeType : null;
}

/**
 * A session's conversation as lines, from its events: finished user and model text and
 * transcriptions, oldest first: [{role: "user"|"model", text, kind: "text"|"speech", at}].
 * @param {any[]} events
 */
export function transcript(events) {
  const lines = [];
  for (const ev of events) {
    for (const t of typedEvents(ev)) {
      let line = null;
      if (t.type === "text" && !t.partial) line = { role: t.fromUser ? "user" : "model", text: t.text, kind: "text" };
      else if ((t.type === "inputTranscription" || t.type === "outputTranscription") && t.finished && t.text) {
        line = { role: t.type === "inputTranscription" ? "user" : "model", text: t.text, kind: "speech" };
      }
      if (line && line.text.trim()) lines.push({ ...line, at: typeof ev.timestamp === "number" ? ev.timestamp : null });
    }
  }
  return lines;
}

/** A transcript as plain text, one line per message ("You: …", "Agent: …"). */
export function transcriptToText(lines, { user = "You", model = "Agent" } = {}) {
  return lines.map((l) => `${l.role === "user" ? user : model}${l.kind === "speech" ? " (spoken)" : ""}: ${l.text}`).join("\n") + (lines.length ? "\n" : "");
}
