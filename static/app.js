// The livegate web client: identity and sessions, the WebSocket, and the wiring between the
// protocol, the conversation view, the recordings, the event console and audio.
// Protocol and REST API: docs/PROTOCOL.md in the repository.

import { Connection } from "./connection.js";
import { Conversation } from "./conversation.js";
import { EventLog } from "./eventlog.js";
import { Recordings } from "./recordings.js";
import { SessionPicker } from "./sessions.js";
import { loadHistory } from "./api.js";
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
  sessionId: validId(params.get("session")),
  modality: (params.get("modality") || "").toUpperCase() === "TEXT" ? "TEXT" : "AUDIO",
  // ?audio=base64 exercises the ADK-style JSON audio path; binary is the default.
  audio: (params.get("audio") || "").toLowerCase() === "base64" ? "base64" : "binary",
};

// Page state for people debugging and for the headless-browser tests. Read-only by convention.
const livegate = {
  status: "connecting",
  userId: state.userId,
  sessionId: state.sessionId,
  events: [], // every parsed downstream event (the newest MAX_KEPT_EVENTS)
  eventCount: 0,
  audioBytes: 0, // PCM received
  playedSamples: 0, // PCM samples the speaker actually played
  bufferedSamples: 0, // PCM samples waiting in the jitter buffer
  flushes: 0, // playback buffer flushes done (barge-in)
  interruptions: 0,
  turns: [], // per finished model turn: {latencyMs, from, first, usage, interrupted}
  historyLoaded: false, // the current session's stored history is on screen (or there was none)
  historyEvents: 0,
  recordings: [], // rows of the recordings panel: {name, version, mimeType, side, url}
  errors: [], // uncaught script errors, also listed in the event console
};
window.livegate = livegate;

function noteError(message) {
  livegate.errors.push(message);
  try {
    log.info("error", message);
  } catch {
    /* the console is not built yet (or building it failed) */
  }
}
window.addEventListener("error", (e) => noteError(`${e.message} (${e.filename}:${e.lineno})`));
window.addEventListener("unhandledrejection", (e) => noteError(`unhandled: ${(e.reason && e.reason.message) || e.reason}`));

const conversation = new Conversation($("messages"), {
  onTurn: (turn) => livegate.turns.push(turn),
});
const log = new EventLog({
  list: $("log"),
  filters: $("log-filters"),
  search: $("log-search"),
  counter: $("log-count"),
  stats: $("audio-stats"),
  scroller: $("log-panel"),
});
const recordings = new Recordings({
  list: $("recordings"),
  counter: $("rec-count"),
  status: $("rec-status"),
  onRows: (rows) => (livegate.recordings = rows),
});
const picker = new SessionPicker({
  select: $("session-select"),
  onPick(sessionId) {
    state.sessionId = sessionId;
    // The console shows one session's events, as the conversation does.
    log.clear();
    log.info("session", `switched to ${sessionId}`);
    openSession({ fresh: false });
  },
  onError: (message) => log.info("error", message),
});

// ---- audio -------------------------------------------------------------------------------------

const player = new Player({
  // The browser blocked playback of arrived audio (no user gesture yet): offer a button that is one.
  onState: (s, hasAudio) => ($("enable-audio").hidden = !(s === "suspended" && hasAudio)),
  onStats({ played, buffered, flushes }) {
    livegate.playedSamples = played;
    livegate.bufferedSamples = buffered;
    livegate.flushes = flushes;
    $("speaking").hidden = buffered === 0;
  },
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
  conversation.firstResponse("audio");
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
      conversation.firstResponse("audio");
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

const shownIds = new Set(); // ids of stored events already rendered from the history

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
    livegate.interruptions += 1;
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
  if (ev.id && shownIds.has(ev.id)) return; // already on screen from the history
  conversation.handleEvent(ev);

  const parts = (ev.content && Array.isArray(ev.content.parts) && ev.content.parts) || [];
  if (parts.some((p) => p.fileData)) recordings.refreshSoon();
  if (ev.turnComplete === true) refreshSessionsSoon();
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

function showStatus(status) {
  livegate.status = status;
  const pill = $("status");
  pill.textContent = status;
  pill.dataset.state = status;
  $("reconnect").hidden = status !== "disconnected";
  if (status !== "disconnected") $("retry-info").textContent = "";
  $("send").disabled = status !== "connected";
}

let quietFailures = false; // after one "disconnected" notice, failed retries stay quiet until open
let wasDropped = false; // the last socket ended without us asking: say so when it comes back

const connection = new Connection({
  url: wsUrl,
  onMessage,
  onStatus: showStatus,
  onOpen() {
    quietFailures = false;
    if (wasDropped) conversation.system(`Reconnected to session ${state.sessionId}.`);
    wasDropped = false;
    log.info("open", wsUrl());
    // The gateway has created the session now: list it.
    picker.refresh(state.userId);
  },
  onClose({ code, reason }, retryInMs) {
    log.info("close", `code ${code}${reason ? " · " + reason : ""}`, { code, reason });
    pendingPcm = null;
    wasDropped = true;
    conversation.abortTurn();
    const retry = retryInMs === null ? "" : ` Reconnecting in ${(retryInMs / 1000).toFixed(1)} s.`;
    if (reason) {
      const kind = code === 1000 || code === 1001 || code === 1012 ? "info" : "error";
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

// ---- sessions ----------------------------------------------------------------------------------

function showIdentity() {
  $("user-id").value = state.userId;
  $("modality").value = state.modality;
  livegate.userId = state.userId;
  livegate.sessionId = state.sessionId;
  picker.setCurrent(state.sessionId);
  // Keep the address shareable/reloadable: it names the session (and non-default choices).
  const p = new URLSearchParams(location.search);
  p.set("session", state.sessionId);
  if (state.userId === "demo-user") p.delete("user");
  else p.set("user", state.userId);
  if (state.modality === "AUDIO") p.delete("modality");
  else p.set("modality", state.modality);
  history.replaceState(null, "", `${location.pathname}?${p}${location.hash}`);
}

let sessionsTimer = 0;
function refreshSessionsSoon() {
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(() => picker.refresh(state.userId), 500);
}

let opening = 0; // the latest openSession call; older ones stop when they see it changed

/**
 * Shows a session: its stored history (unless it is brand new), its recordings, then connects.
 * The history is loaded before connecting so live events always come after it.
 */
async function openSession({ fresh }) {
  const generation = ++opening;
  connection.stop();
  pendingPcm = null;
  player.flush();
  conversation.clear();
  recordings.clear();
  shownIds.clear();
  quietFailures = false;
  wasDropped = false;
  livegate.historyLoaded = false;
  livegate.historyEvents = 0;
  showStatus("connecting");
  showIdentity();
  if (!fresh) {
    try {
      const { events, total } = await loadHistory(state.userId, state.sessionId);
      if (generation !== opening) return;
      for (const ev of events) if (ev.id) shownIds.add(ev.id);
      conversation.renderHistory(events, total);
      livegate.historyEvents = events.length;
      if (events.length) log.info("history", `${events.length} stored events of ${state.sessionId}`);
    } catch (error) {
      if (generation !== opening) return;
      conversation.system(`Could not load this session's history: ${error.message}`, "error");
    }
  }
  livegate.historyLoaded = true;
  connection.reconnect();
  // A new session has nothing stored yet: listing its recordings would only be a 404.
  if (fresh) recordings.startEmpty(state.userId, state.sessionId);
  else recordings.load(state.userId, state.sessionId);
}

/** Reconnects the same session with new options; the conversation stays. */
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
  log.clear();
  log.info("session", `new session ${state.sessionId}`);
  openSession({ fresh: true });
  $("text-input").focus();
});

$("modality").addEventListener("change", (e) => {
  state.modality = e.target.value === "TEXT" ? "TEXT" : "AUDIO";
  conversation.system(`Replies now as ${state.modality === "TEXT" ? "text" : "voice"}; reconnecting.`);
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
  // Another user has other sessions: this id under them is another conversation.
  openSession({ fresh: false });
});

// After a takeover another tab may have gone on with the session: reload it, history and all.
$("reconnect").addEventListener("click", () => openSession({ fresh: false }));

$("rec-refresh").addEventListener("click", () => recordings.load(state.userId, state.sessionId));

// Back online: no need to wait for the backoff.
window.addEventListener("online", () => {
  if (!connection.isOpen && livegate.historyLoaded) connection.reconnect();
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
  log.info("mic", "microphone off");
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

// Phones get the side panels collapsed, so the conversation has the screen; turning a tablet (or
// resizing a window) across the breakpoint folds or unfolds them again.
const narrow = window.matchMedia("(max-width: 800px)");
function fitPanels() {
  $("log-panel").open = !narrow.matches;
  $("rec-panel").open = !narrow.matches;
}
narrow.addEventListener("change", fitPanels);
fitPanels();

const fresh = state.sessionId === null;
if (fresh) state.sessionId = newSessionId();
openSession({ fresh });
