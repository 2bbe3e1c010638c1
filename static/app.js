// The livegate web client: identity, the WebSocket, and the wiring between the protocol, the
// conversation view, the event log and audio. Protocol: PROTOCOL.md in the repository.

import { Connection } from "./connection.js";
import { Conversation } from "./conversation.js";
import { EventLog } from "./eventlog.js";
import { Player, Recorder, base64ToBytes, levelFromRms, parseRate, DEFAULT_PLAY_RATE } from "./audio.js";

const $ = (id) => document.getElementById(id);
const ID_RE = /^[A-Za-z0-9._:@-]{1,128}$/; // what the gateway accepts in /ws/{user}/{session}
const VOICE_RMS = 0.02; // mic chunks louder than this count as speech (latency anchor)
const MAX_KEPT_EVENTS = 10000; // window.livegate.events keeps the newest ones (eventCount counts all)

const params = new URLSearchParams(location.search);
const validId = (s) => (s && ID_RE.test(s) ? s : null);

function newSessionId() {
  const [a, b] = crypto.getRandomValues(new Uint32Array(2));
  return "s-" + a.toString(36) + b.toString(36);
}

const state = {
  userId: validId(params.get("user")) || "demo-user",
  sessionId: validId(params.get("session")) || newSessionId(),
  modality: (params.get("modality") || "").toUpperCase() === "TEXT" ? "TEXT" : "AUDIO",
  // ?audio=base64 exercises the ADK-style JSON audio path; binary is the default.
  audio: (params.get("audio") || "").toLowerCase() === "base64" ? "base64" : "binary",
};

// For headless-browser tests: every parsed downstream event, and the audio bytes received.
const livegate = {
  events: [],
  eventCount: 0,
  audioBytes: 0,
  status: "connecting",
  userId: state.userId,
  sessionId: state.sessionId,
};
window.livegate = livegate;

const conversation = new Conversation($("messages"));
const log = new EventLog({ list: $("log"), showAudio: $("show-audio"), counter: $("log-count"), stats: $("audio-stats") });

// ---- audio -------------------------------------------------------------------------------------

const player = new Player({
  // The browser blocked playback of arrived audio (no user gesture yet): offer a button that is one.
  onState: (s, hasAudio) => ($("enable-audio").hidden = !(s === "suspended" && hasAudio)),
});

const recorder = new Recorder({
  onChunk(pcm, rms) {
    if (connection.send(pcm)) log.sentAudio(pcm.byteLength);
    $("level").value = levelFromRms(rms);
    if (rms > VOICE_RMS) conversation.noteVoice();
  },
});
recorder.onEnded = () => stopMic("The microphone stopped (device removed or permission revoked).");

// In binary mode the PCM frame comes first and its event (with the rate) right after it, so the
// frame waits here for that event. A second frame without an event in between plays at the last rate.
let pendingPcm = null;
let lastRate = DEFAULT_PLAY_RATE;

function onAudioFrame(buffer) {
  livegate.audioBytes += buffer.byteLength;
  conversation.firstResponse();
  if (pendingPcm) player.play(pendingPcm, lastRate);
  pendingPcm = buffer;
}

/** Plays the audio of one event; returns the number of PCM bytes it carried. */
function playEventAudio(ev) {
  let bytes = 0;
  const parts = (ev.content && Array.isArray(ev.content.parts) && ev.content.parts) || [];
  for (const part of parts) {
    const blob = part.inlineData;
    if (!blob || !/^audio\//i.test(blob.mimeType || "")) continue;
    const rate = (lastRate = parseRate(blob.mimeType, lastRate));
    if (blob.data) {
      // base64 mode: the audio is inside the JSON.
      let pcm;
      try {
        pcm = base64ToBytes(blob.data);
      } catch {
        conversation.system("Could not decode base64 audio in an event.", "error");
        continue;
      }
      bytes += pcm.byteLength;
      livegate.audioBytes += pcm.byteLength;
      conversation.firstResponse();
      player.play(pcm.buffer, rate);
    } else if (pendingPcm) {
      bytes += pendingPcm.byteLength;
      player.play(pendingPcm, rate);
      pendingPcm = null;
    }
  }
  return bytes;
}

// ---- downstream --------------------------------------------------------------------------------

function onMessage(data) {
  if (data instanceof ArrayBuffer) {
    onAudioFrame(data);
    return;
  }
  if (typeof data !== "string") return; // binaryType is arraybuffer: nothing else arrives
  let ev;
  try {
    ev = JSON.parse(data);
  } catch {
    log.info("error", "a text frame that is not JSON", { frame: data.slice(0, 2000) });
    return;
  }
  if (!ev || typeof ev !== "object") return;
  livegate.eventCount += 1;
  livegate.events.push(ev);
  if (livegate.events.length > MAX_KEPT_EVENTS) livegate.events.splice(0, livegate.events.length - MAX_KEPT_EVENTS);

  if (ev.interrupted === true) {
    // Barge-in: the rest of the answer must not be heard. No audio of it follows this event.
    pendingPcm = null;
    player.flush();
  }
  const bytes = playEventAudio(ev);
  if (pendingPcm) {
    // A frame whose event did not follow: play it anyway rather than drop it.
    player.play(pendingPcm, lastRate);
    pendingPcm = null;
  }
  log.event(ev, bytes);
  conversation.handleEvent(ev);
}

// ---- connection --------------------------------------------------------------------------------

function wsUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const query = new URLSearchParams({ audio: state.audio, modality: state.modality });
  // Ids are validated against ID_RE, whose characters are all legal in a path segment: sent as-is,
  // so the gateway sees exactly the id (no reliance on percent-decoding of `@` or `:`).
  const path = `/ws/${state.userId}/${state.sessionId}`;
  return `${scheme}//${location.host}${path}?${query}`;
}

let quietFailures = false; // after one "disconnected" notice, failed retries stay quiet until open
let wasDropped = false; // the last socket ended without us asking: say so when it comes back

const connection = new Connection({
  url: wsUrl,
  onMessage,
  onStatus(status) {
    livegate.status = status;
    const pill = $("status");
    pill.textContent = status;
    pill.dataset.state = status;
    $("reconnect").hidden = status !== "disconnected";
    if (status !== "disconnected") $("retry-info").textContent = "";
  },
  onOpen() {
    quietFailures = false;
    if (wasDropped) conversation.system(`Reconnected to session ${state.sessionId}.`);
    wasDropped = false;
    log.info("open", wsUrl());
  },
  onClose({ code, reason }, retryInMs) {
    log.info("close", `code ${code}${reason ? " · " + reason : ""}`, { code, reason });
    pendingPcm = null;
    wasDropped = true;
    conversation.abortTurn();
    const retry = retryInMs === null ? "" : ` Reconnecting in ${(retryInMs / 1000).toFixed(1)} s.`;
    if (reason) {
      const kind = code === 1000 || code === 1001 ? "info" : "error";
      conversation.system(`Connection closed (${code}): ${reason}.${retry}`, kind);
    } else if (!quietFailures) {
      conversation.system(`Disconnected (code ${code}).${retry}`);
    }
    quietFailures = true;
    if (retryInMs === null) {
      $("retry-info").textContent = "not reconnecting";
      conversation.system("Press Reconnect to take this session back.");
    } else {
      $("retry-info").textContent = `retrying in ${(retryInMs / 1000).toFixed(1)} s`;
    }
  },
});

function sendJson(message) {
  if (!connection.send(JSON.stringify(message))) return false;
  log.sent(message);
  return true;
}

// ---- identity ----------------------------------------------------------------------------------

function showIdentity() {
  $("session-id").textContent = state.sessionId;
  $("user-id").value = state.userId;
  $("modality").value = state.modality;
  livegate.userId = state.userId;
  livegate.sessionId = state.sessionId;
  // Keep the address shareable/reloadable: it names the session (and non-default choices).
  const p = new URLSearchParams(location.search);
  p.set("session", state.sessionId);
  if (state.userId === "demo-user") p.delete("user");
  else p.set("user", state.userId);
  if (state.modality === "AUDIO") p.delete("modality");
  else p.set("modality", state.modality);
  history.replaceState(null, "", `${location.pathname}?${p}${location.hash}`);
}

function restart() {
  pendingPcm = null;
  wasDropped = false;
  player.flush();
  conversation.abortTurn();
  quietFailures = false;
  showIdentity();
  connection.reconnect();
}

$("new-session").addEventListener("click", () => {
  state.sessionId = newSessionId();
  conversation.clear();
  log.info("session", state.sessionId);
  restart();
});

$("modality").addEventListener("change", (e) => {
  state.modality = e.target.value === "TEXT" ? "TEXT" : "AUDIO";
  conversation.system(`Answers now in ${state.modality === "TEXT" ? "text" : "audio"}; reconnecting.`);
  restart();
});

$("user-id").addEventListener("change", (e) => {
  const input = e.target;
  const value = input.value.trim();
  if (!ID_RE.test(value)) {
    input.setAttribute("aria-invalid", "true");
    conversation.system("User id: 1–128 characters of A–Z a–z 0–9 . _ : @ -", "error");
    return;
  }
  input.removeAttribute("aria-invalid");
  if (value === state.userId) return;
  state.userId = value;
  restart();
});

$("reconnect").addEventListener("click", () => {
  quietFailures = false;
  connection.reconnect();
});

// Back online: no need to wait for the backoff.
window.addEventListener("online", () => {
  if (!connection.isOpen) connection.reconnect();
});

// ---- composer ----------------------------------------------------------------------------------

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  player.unlock(); // a user gesture: the moment the browser lets audio start
  const input = $("text-input");
  const text = input.value.trim();
  if (!text) return;
  if (!sendJson({ type: "text", text })) {
    conversation.system("Not connected: the message was not sent.", "error");
    return;
  }
  conversation.userText(text);
  input.value = "";
});

function setMicUi(on) {
  const button = $("mic");
  button.setAttribute("aria-pressed", String(on));
  button.querySelector(".label").textContent = on ? "Stop mic" : "Start mic";
  if (!on) $("level").value = 0;
}

let micStarting = false;

async function startMic() {
  micStarting = true;
  $("mic").setAttribute("aria-busy", "true");
  try {
    await recorder.start();
    setMicUi(true);
    log.info("mic", "microphone on");
  } catch (error) {
    setMicUi(false);
    conversation.system(`Microphone unavailable: ${error.message || error.name}`, "error");
  } finally {
    micStarting = false;
    $("mic").removeAttribute("aria-busy");
  }
}

function stopMic(notice) {
  recorder.stop();
  setMicUi(false);
  // Tells the model the audio stream paused, so it does not wait for more speech.
  sendJson({ type: "audio_stream_end" });
  if (notice) conversation.system(notice);
}

$("mic").addEventListener("click", () => {
  player.unlock();
  if (micStarting) return;
  if (recorder.active) stopMic();
  else startMic();
});

$("enable-audio").addEventListener("click", () => player.unlock());
$("clear-log").addEventListener("click", () => log.clear());

// ---- start -------------------------------------------------------------------------------------

// Phones get the log collapsed, so the conversation has the screen.
if (window.matchMedia("(max-width: 800px)").matches) $("log-panel").open = false;

showIdentity();
connection.connect();
