// The livegate web client: one WebSocket per session, ADK events rendered as a conversation.
import { Player, Recorder } from "./audio.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const userId = params.get("user") || "demo-user";
let sessionId = params.get("session") || "s-" + Math.random().toString(36).slice(2, 10);

// For tests and curious people: every event received, and the audio bytes played.
window.livegate = { events: [], audioBytes: 0 };

const player = new Player();
let ws = null;
let retryDelay = 500;
let retryTimer = null;
let pendingAudioRate = 24000;
let turn = freshTurn();

function freshTurn() {
  return { text: null, output: null, input: null, spoken: null, startedAt: null, firstAt: null, usage: null };
}

// ---- connection -------------------------------------------------------------------------

function setStatus(status) {
  const el = $("status");
  el.textContent = status;
  el.className = "status " + status;
}

function connect() {
  clearTimeout(retryTimer);
  $("session-id").textContent = sessionId;
  const modality = $("modality").value;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/ws/${encodeURIComponent(userId)}/${encodeURIComponent(sessionId)}?audio=binary&modality=${modality}`;
  setStatus("connecting");
  const socket = new WebSocket(url);
  socket.binaryType = "arraybuffer";
  ws = socket;
  socket.onopen = () => {
    setStatus("connected");
    retryDelay = 500;
    log("up", "connected", { userId, sessionId, modality });
  };
  socket.onmessage = (message) => {
    if (message.data instanceof ArrayBuffer) {
      window.livegate.audioBytes += message.data.byteLength;
      markFirstResponse();
      player.play(message.data, pendingAudioRate);
      return;
    }
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      log("error", "bad frame", message.data);
      return;
    }
    window.livegate.events.push(event);
    handleEvent(event);
  };
  socket.onclose = (close) => {
    if (ws !== socket) return;
    setStatus("disconnected");
    finalizeTurn();
    if (close.code === 4000) {
      note(`Disconnected: ${close.reason}. Reload to take the session back.`);
      return;
    }
    if (close.reason) note(`Connection closed: ${close.reason}`);
    retryTimer = setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 10000);
  };
}

function reconnect() {
  if (ws) {
    const old = ws;
    ws = null;
    old.close(1000, "reconnecting");
  }
  connect();
}

function send(value) {
  if (!ws || ws.readyState !== WebSocket.OPEN) return false;
  ws.send(value);
  return true;
}

// ---- rendering --------------------------------------------------------------------------

function bubble(who, classes = []) {
  const el = document.createElement("div");
  el.className = ["msg", who, ...classes].join(" ");
  $("messages").appendChild(el);
  scroll();
  return el;
}

function note(text, error = false) {
  const el = document.createElement("div");
  el.className = "note" + (error ? " error" : "");
  el.textContent = text;
  $("messages").appendChild(el);
  scroll();
}

function scroll() {
  const m = $("messages");
  m.scrollTop = m.scrollHeight;
}

function markFirstResponse() {
  if (turn.startedAt !== null && turn.firstAt === null) turn.firstAt = performance.now();
}

function finalize(el) {
  if (!el) return;
  el.classList.remove("typing");
  el.classList.add("final");
}

function finalizeTurn(interrupted = false) {
  for (const el of [turn.text, turn.output, turn.spoken, turn.input]) {
    if (!el) continue;
    if (interrupted && el !== turn.input) el.classList.add("interrupted");
    finalize(el);
  }
  const parts = [];
  if (turn.firstAt !== null && turn.startedAt !== null) {
    parts.push(`first response in ${Math.round(turn.firstAt - turn.startedAt)} ms`);
  }
  if (turn.usage) {
    const u = turn.usage;
    parts.push(`${u.totalTokenCount ?? 0} tokens (${u.promptTokenCount ?? 0} in, ${u.candidatesTokenCount ?? 0} out)`);
  }
  if (parts.length && (turn.text || turn.output || turn.spoken)) {
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = parts.join(" · ");
    $("messages").appendChild(meta);
    scroll();
  }
  turn = freshTurn();
}

// Applies a transcription fragment (append) or finished text (replace) to a bubble.
function transcript(slot, who, t) {
  if (!t || typeof t.text !== "string") return;
  if (!turn[slot]) {
    turn[slot] = bubble(who, ["transcript", "typing"]);
    turn[slot].textContent = "";
  }
  const el = turn[slot];
  if (t.finished) {
    el.textContent = t.text;
    finalize(el);
    turn[slot] = null;
    if (slot === "input") turn.startedAt = performance.now();
    // The model's finished transcript may still be cut off by a later `interrupted`.
    if (slot === "output") turn.spoken = el;
  } else {
    el.textContent += t.text;
  }
  scroll();
}

function handleEvent(event) {
  const kind = eventKind(event);
  log(kind === "error" ? "error" : "down", kind, event);

  if (event.errorCode || event.errorMessage) {
    note(`Error ${event.errorCode ?? ""}: ${event.errorMessage ?? ""}`, true);
    return;
  }
  if (event.usageMetadata) turn.usage = event.usageMetadata;
  if (event.turnComplete === true) {
    finalizeTurn(false);
    return;
  }
  if (event.interrupted === true && !event.content) {
    player.flush();
    finalizeTurn(true);
    return;
  }
  if (event.inputTranscription) transcript("input", "user", event.inputTranscription);
  if (event.outputTranscription) {
    markFirstResponse();
    transcript("output", "agent", event.outputTranscription);
  }
  const parts = (event.content && event.content.parts) || [];
  for (const part of parts) {
    if (part.inlineData) {
      const mime = part.inlineData.mimeType || "";
      const rate = Number((mime.match(/rate=(\d+)/) || [])[1]) || 24000;
      pendingAudioRate = rate;
      if (part.inlineData.data) {
        markFirstResponse();
        const bytes = base64ToBytes(part.inlineData.data);
        window.livegate.audioBytes += bytes.byteLength;
        player.play(bytes.buffer, rate);
      }
    } else if (typeof part.text === "string" && !part.thought) {
      markFirstResponse();
      if (event.partial === true) {
        if (!turn.text) {
          turn.text = bubble("agent", ["typing"]);
          turn.text.textContent = "";
        }
        turn.text.textContent += part.text;
      } else if (event.author !== "user") {
        // The merged text replaces the streamed partials: the answer is never shown twice.
        if (!turn.text) turn.text = bubble("agent");
        turn.text.textContent = part.text;
        if (event.interrupted) turn.text.classList.add("interrupted");
        finalize(turn.text);
      }
      scroll();
    } else if (part.fileData) {
      const name = (part.fileData.fileUri || "").split("/").pop();
      note(`recording saved: ${name}`);
    } else if (part.functionCall) {
      note(`tool call: ${part.functionCall.name}(${JSON.stringify(part.functionCall.args ?? {})})`);
    } else if (part.functionResponse) {
      note(`tool result: ${part.functionResponse.name} → ${JSON.stringify(part.functionResponse.response ?? {}).slice(0, 160)}`);
    }
  }
  if (event.interrupted === true) {
    player.flush();
    finalizeTurn(true);
  }
}

function base64ToBytes(text) {
  const std = text.replace(/-/g, "+").replace(/_/g, "/");
  const padded = std + "===".slice((std.length + 3) % 4);
  const raw = atob(padded);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

// ---- event log --------------------------------------------------------------------------

function eventKind(e) {
  if (e.errorCode || e.errorMessage) return "error";
  if (e.turnComplete) return "turnComplete";
  if (e.interrupted && !e.content) return "interrupted";
  if (e.usageMetadata) return "usage";
  if (e.inputTranscription) return "transcript-in";
  if (e.outputTranscription) return "transcript-out";
  if (e.liveSessionResumptionUpdate) return "resumption";
  const parts = (e.content && e.content.parts) || [];
  if (parts.some((p) => p.inlineData)) return "audio";
  if (parts.some((p) => p.fileData)) return "recording";
  if (parts.some((p) => p.functionCall || p.functionResponse)) return "tool";
  if (parts.some((p) => typeof p.text === "string")) return e.partial ? "partial" : "text";
  return "event";
}

function log(direction, kind, payload) {
  if (kind === "audio" && !$("show-audio").checked) return;
  const item = document.createElement("li");
  item.className = direction;
  item.tabIndex = 0;
  const label = document.createElement("span");
  label.className = "kind";
  label.textContent = (direction === "up" ? "↑ " : "↓ ") + kind;
  const who = document.createElement("span");
  who.textContent = payload && payload.author ? payload.author : "";
  const pre = document.createElement("pre");
  pre.textContent = JSON.stringify(payload, null, 2);
  item.append(label, who, pre);
  const toggle = () => item.classList.toggle("open");
  item.onclick = toggle;
  item.onkeydown = (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      toggle();
    }
  };
  const list = $("log");
  list.appendChild(item);
  while (list.children.length > 500) list.removeChild(list.firstChild);
  list.scrollTop = list.scrollHeight;
}

// ---- controls ---------------------------------------------------------------------------

const recorder = new Recorder(
  (chunk) => send(chunk),
  (level) => ($("level").value = level),
);

$("composer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = $("text-input");
  const text = input.value.trim();
  if (!text) return;
  player.start(pendingAudioRate).catch(() => {});
  if (!send(JSON.stringify({ type: "text", text }))) {
    note("Not connected: the message was not sent.", true);
    return;
  }
  finalizeTurn();
  bubble("user").textContent = text;
  turn.startedAt = performance.now();
  log("up", "text", { type: "text", text });
  input.value = "";
});

$("mic").addEventListener("click", async () => {
  const button = $("mic");
  if (recorder.running) {
    await recorder.stop();
    send(JSON.stringify({ type: "audio_stream_end" }));
    button.setAttribute("aria-pressed", "false");
    button.textContent = "Start mic";
    return;
  }
  try {
    await player.start(pendingAudioRate);
    await recorder.start();
    button.setAttribute("aria-pressed", "true");
    button.textContent = "Stop mic";
    note("Microphone on: speak, and pause to let the agent answer.");
  } catch (error) {
    note(`Microphone unavailable: ${error.message}`, true);
  }
});

$("modality").addEventListener("change", reconnect);
$("new-session").addEventListener("click", () => {
  sessionId = "s-" + Math.random().toString(36).slice(2, 10);
  $("messages").replaceChildren();
  turn = freshTurn();
  reconnect();
});
$("clear-log").addEventListener("click", () => $("log").replaceChildren());

connect();
