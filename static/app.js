// The livegate web client, built on the client library's public API (/lib/, clients/js in the
// repository): identity and sign-in, sessions, one LiveSession at a time, and the wiring between
// its events and the conversation, the recordings, the event console, audio and the agent state.

import { AgentActivity, GatewayApi, LiveSession, ID_PATTERN, newSessionId, transcript, transcriptToText } from "/lib/index.js";
import { Microphone, Player, connectAudio, listDevices } from "/lib/audio/index.js";
import { Conversation, withCode } from "./conversation.js";
import { EventLog } from "./eventlog.js";
import { Recordings } from "./recordings.js";
import { SessionList, titleOf } from "./sessions.js";
import { SettingsPanel } from "./settings.js";
import { SignIn } from "./signin.js";
import { Panels } from "./panels.js";
import { Waveform } from "./waveform.js";

const $ = (id) => document.getElementById(id);
const VOICE_LEVEL = 0.43; // a microphone chunk louder than this (about -34 dBFS) is speech
const MAX_KEPT_EVENTS = 10000; // window.livegate.events keeps the newest (eventCount counts all)
const MAX_EXPORT_EVENTS = 100000;

const params = new URLSearchParams(location.search);
const validId = (s) => (s && ID_PATTERN.test(s) ? s : null);

const state = {
  userId: validId(params.get("user")) || "demo-user",
  sessionId: validId(params.get("session")),
  modality: (params.get("modality") || "").toUpperCase() === "TEXT" ? "TEXT" : "AUDIO",
  // ?audio=base64 exercises the ADK-style JSON audio path; binary is the default.
  audio: (params.get("audio") || "").toLowerCase() === "base64" ? "base64" : "binary",
  bound: false, // the sign-in reaches one session only
};

// Page state for people debugging and for the headless-browser tests. Read-only by convention.
const livegate = {
  status: "connecting",
  userId: state.userId,
  sessionId: state.sessionId,
  events: [],
  eventCount: 0,
  audioBytes: 0,
  playedSamples: 0,
  bufferedSamples: 0,
  flushes: 0,
  interruptions: 0,
  turns: [],
  historyLoaded: false,
  historyEvents: 0,
  recordings: [],
  errors: [],
  setup: null,
  agentState: "idle",
  fatal: null,
  live: null, // GET /api/live
  lastExport: null,
  micChunks: 0, // microphone chunks captured (not muted)
  sentChunks: 0, // of those, sent to the gateway
};
window.livegate = livegate;

function noteError(message) {
  livegate.errors.push(message);
  try {
    log.info("error", message);
  } catch {
    /* the console is not built yet */
  }
}
window.addEventListener("error", (e) => noteError(`${e.message} (${e.filename}:${e.lineno})`));
window.addEventListener("unhandledrejection", (e) => noteError(`unhandled: ${(e.reason && e.reason.message) || e.reason}`));

// ---- the pieces ------------------------------------------------------------------------------

let session = null; // the LiveSession of the session on screen
let voice = null; // its audio wiring
let activity = null;
let signin = null;
const api = new GatewayApi({ token: () => (signin ? signin.token : null) });

const conversation = new Conversation($("messages"), {
  onTurn: (turn) => livegate.turns.push(turn),
  onUserText: (text) => sessions.setTitle(state.sessionId, titleOf([{ author: "user", content: { role: "user", parts: [{ text }] } }])),
  onRecordingTurn: () => recordings.relink(),
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
  turnOf: (name) => conversation.turnOf(name),
  showTurn: (el) => {
    panels.closeSheet();
    conversation.show(el);
  },
  onRows: (rows) => (livegate.recordings = rows),
});
const sessions = new SessionList({
  list: $("sessions"),
  api,
  onPick(sessionId) {
    state.sessionId = sessionId;
    log.clear();
    log.info("session", `switched to ${sessionId}`);
    panels.closeSheet();
    openSession({ fresh: false });
  },
  onError: (message) => log.info("error", message),
});
const waveform = new Waveform($("waveform"));
const panels = new Panels({ onOpen: (id) => id === "log-panel" && log.renderCount() });

// ---- audio -----------------------------------------------------------------------------------

const player = new Player({
  // The browser blocked playback of arrived audio (no gesture yet): offer a button that is one.
  onState: (s, hasAudio) => ($("enable-audio").hidden = !(s === "suspended" && hasAudio)),
  onStats({ played, buffered, flushes }) {
    livegate.playedSamples = played;
    livegate.bufferedSamples = buffered;
    livegate.flushes = flushes;
    $("speaking").hidden = buffered === 0;
    if (buffered > 0) waveform.start(player);
    if (activity) activity.update();
  },
});
const microphone = new Microphone({
  onLevel: (level) => ($("level").value = level),
  onEnded: () => stopMic("The microphone stopped (device removed or permission revoked)."),
});

// ---- status, banner, sign-in -----------------------------------------------------------------

const STATUS = { connecting: "connecting", open: "connected", reconnecting: "reconnecting", closed: "disconnected", idle: "connecting" };

function showStatus(status) {
  const label = STATUS[status] || status;
  livegate.status = label;
  const pill = $("status");
  pill.textContent = label;
  pill.dataset.state = label;
  updateControls();
}

function updateControls() {
  const connected = livegate.status === "connected";
  const signedIn = !signin || signin.signedIn;
  $("send").disabled = !connected;
  $("mic").disabled = !signedIn;
  $("ptt").disabled = !signedIn;
  $("user-id").disabled = !signedIn || (signin && signin.required);
  $("modality").disabled = !signedIn;
  $("new-session").disabled = !signedIn || state.bound;
  for (const id of ["export-text", "export-json", "export-bundle", "delete-session"]) $(id).disabled = !signedIn;
  sessions.setDisabled(!signedIn || state.bound);
}

/** One banner for an error retrying cannot fix: what happened, what to do, one action. */
function showBanner({ title, text, hint, action, onAction }) {
  $("banner-title").textContent = title;
  $("banner-text").replaceChildren(...withCode(text));
  $("banner-hint").replaceChildren(...withCode(hint || ""));
  const button = $("banner-action");
  button.hidden = !action;
  button.textContent = action || "";
  button.onclick = onAction || null;
  $("banner").hidden = false;
}

function hideBanner() {
  $("banner").hidden = true;
}
$("banner-close").addEventListener("click", hideBanner);

const FATAL_TITLES = {
  model: "The model refused this session.",
  unauthorized: "Sign-in needed.",
  forbidden: "Not allowed.",
  takenOver: "This session is open elsewhere.",
  policy: "The gateway closed the connection.",
  gaveUp: "The gateway cannot be reached.",
  badRequest: "The gateway refused this session.",
};

let pendingText = null; // the user's last typed message, until an answer starts

function onFatal(fatal) {
  livegate.fatal = fatal;
  if (fatal.kind === "unauthorized" && signin && signin.required) {
    signin.signOut();
    showSignIn(signin.reason());
    return;
  }
  // The typed message the failure left unanswered goes back into the box, to send again.
  if (pendingText && !$("text-input").value) $("text-input").value = pendingText;
  pendingText = null;
  const action = fatal.kind === "takenOver" ? "Take it back" : "Try again";
  showBanner({
    title: FATAL_TITLES[fatal.kind] || "Disconnected.",
    text: fatal.message,
    hint: fatal.hint,
    action,
    onAction: () => {
      hideBanner();
      openSession({ fresh: false });
    },
  });
}

function showSignIn(why) {
  // Closed first: its "closed" status must not overwrite the one below.
  if (session) session.close();
  session = null;
  stopMic();
  livegate.status = "sign-in needed";
  const pill = $("status");
  pill.textContent = "sign-in needed";
  pill.dataset.state = "disconnected";
  $("account").hidden = true;
  $("account-line").hidden = true;
  $("signin").hidden = false;
  $("signin-why").replaceChildren(...withCode(why));
  updateControls();
  $("signin-token").focus();
}

function showAccount() {
  const claims = signin.claims;
  $("account").hidden = !claims;
  $("account-line").hidden = !claims;
  if (!claims) return;
  const until = typeof claims.exp === "number" ? ` · until ${new Date(claims.exp * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}` : "";
  $("account-who").textContent = `Signed in as ${claims.sub}${until}`;
  $("account-line-who").textContent = $("account-who").textContent;
  const note = $("identity-note");
  note.hidden = !state.bound && !signin.required;
  note.textContent = state.bound
    ? `This sign-in reaches session ${state.sessionId} only: other sessions and New are unavailable.`
    : "The user is the one you signed in as.";
}

$("signin").addEventListener("submit", (e) => {
  e.preventDefault();
  const error = signin.signIn($("signin-token").value);
  if (error) {
    $("signin-why").replaceChildren(...withCode(error));
    return;
  }
  $("signin-token").value = "";
  begin();
});

for (const id of ["sign-out", "sign-out-panel"]) {
  $(id).addEventListener("click", () => {
    signin.signOut();
    panels.closeSheet();
    showSignIn("You signed out.");
  });
}

// ---- the live session ------------------------------------------------------------------------

let dropped = false; // the connection was lost; say so once, and again when it is back

function wire(s) {
  s.on("status", ({ status, retryInMs }) => {
    showStatus(status);
    $("retry-info").textContent = retryInMs !== undefined ? `retrying in ${(retryInMs / 1000).toFixed(1)} s` : "";
  });
  s.on("open", ({ reconnected }) => {
    log.info("open", s.wsUrl());
    if (reconnected && dropped) conversation.system(`Reconnected to session ${state.sessionId}.`);
    dropped = false;
    hideBanner();
    sessions.refresh(); // the gateway has created the session now
  });
  s.on("close", ({ code, reason, retryInMs, fatal }) => {
    log.info("close", `code ${code}${reason ? " · " + reason : ""}`, { code, reason });
    if (fatal || dropped) return;
    dropped = true;
    const retry = retryInMs === null ? "" : ` Reconnecting in ${(retryInMs / 1000).toFixed(1)} s.`;
    conversation.system(reason ? `Connection closed (${code}): ${reason}.${retry}` : `Disconnected (code ${code}).${retry}`);
  });
  s.on("fatal", onFatal);
  s.on("sent", ({ message }) => {
    if (message.type === "setup") livegate.setup = message;
    log.sent(message);
  });
  s.on("event", ({ event }) => {
    livegate.eventCount += 1;
    livegate.events.push(event);
    if (livegate.events.length > MAX_KEPT_EVENTS) livegate.events.splice(0, livegate.events.length - MAX_KEPT_EVENTS);
    if (!hasAudio(event)) log.event(event, 0);
    conversation.handleEvent(event);
  });
  s.on("audio", ({ pcm, sampleRate, event }) => {
    livegate.audioBytes += pcm.byteLength;
    if (event) log.event(event, pcm.byteLength);
    conversation.spoken(pcm.byteLength / 2 / sampleRate);
  });
  s.on("text", (t) => !t.fromUser && (pendingText = null));
  s.on("outputTranscription", () => (pendingText = null));
  s.on("interrupted", () => (livegate.interruptions += 1));
  s.on("turnAborted", ({ reason }) => conversation.abortTurn(reason));
  s.on("recording", () => recordings.refreshSoon());
  s.on("turnComplete", () => setTimeout(() => sessions.refresh(), 500));
}

function hasAudio(ev) {
  const parts = (ev.content && Array.isArray(ev.content.parts) && ev.content.parts) || [];
  return parts.some((p) => p.inlineData && /^audio\//i.test(p.inlineData.mimeType || ""));
}

let opening = 0;

/**
 * Shows a session: its stored history (unless it is brand new), its recordings, then connects.
 * The history is loaded first, so live events come after it and none is shown twice.
 */
async function openSession({ fresh }) {
  const generation = ++opening;
  if (session) session.close();
  if (voice) voice.detach();
  if (activity) activity.detach();
  player.flush();
  hideBanner();
  conversation.clear();
  recordings.clear();
  livegate.historyLoaded = false;
  livegate.historyEvents = 0;
  livegate.fatal = null;
  dropped = false;
  pendingText = null;
  showIdentity();
  session = new LiveSession({
    userId: state.userId,
    sessionId: state.sessionId,
    token: signin.required ? () => signin.token : null,
    modality: state.modality,
    audio: state.audio,
    settings: settingsMessage(),
  });
  const s = session;
  wire(s);
  voice = connectAudio(s, { microphone, player, mode: settings.audio().mode });
  activity = new AgentActivity(s, {
    isPlaying: () => player.playing,
    isListening: () => microphone.active && !microphone.muted,
    onChange: showAgentState,
  });
  showStatus("connecting");
  if (!fresh) {
    try {
      const { events, total } = await s.loadHistory({ max: 600 });
      if (generation !== opening) return;
      conversation.renderHistory(events, total);
      livegate.historyEvents = events.length;
      sessions.setTitle(state.sessionId, titleOf(events));
      if (events.length) log.info("history", `${events.length} stored events of ${state.sessionId}`);
    } catch (error) {
      if (generation !== opening) return;
      conversation.system(`Could not load this session's history: ${error.message}`, "error");
    }
  }
  livegate.historyLoaded = true;
  s.connect().catch(() => {}); // a fatal error is shown by the banner
  if (fresh) recordings.startEmpty(s.api, state.userId, state.sessionId);
  else recordings.load(s.api, state.userId, state.sessionId);
}

function settingsMessage() {
  const message = settings.setupMessage();
  const { type, ...fields } = message;
  void type;
  return fields;
}

function showIdentity() {
  $("user-id").value = state.userId;
  $("modality").value = state.modality;
  livegate.userId = state.userId;
  livegate.sessionId = state.sessionId;
  sessions.setCurrent(state.userId, state.sessionId);
  // The address names the session (and non-default choices): reloadable, shareable.
  const p = new URLSearchParams(location.search);
  p.set("session", state.sessionId);
  if (state.userId === "demo-user" || (signin && signin.required)) p.delete("user");
  else p.set("user", state.userId);
  if (state.modality === "AUDIO") p.delete("modality");
  else p.set("modality", state.modality);
  history.replaceState(null, "", `${location.pathname}?${p}${location.hash}`);
}

function showAgentState(agentState) {
  livegate.agentState = agentState;
  const pill = $("agent-state");
  pill.textContent = agentState;
  pill.dataset.state = agentState;
}

// ---- settings --------------------------------------------------------------------------------

const settings = new SettingsPanel({
  $,
  onModelChange() {
    $("settings-state").textContent = settings.changed ? "(changed)" : "";
    // New settings start a new connection: an answer in progress ends, marked as such.
    if (session) session.updateSettings(settingsMessage());
  },
  async onAudioChange(audio) {
    if (voice) voice.setMode(audio.mode);
    $("ptt").hidden = audio.mode !== "pushToTalk";
    try {
      await microphone.configure({ deviceId: audio.micDevice, echoCancellation: audio.echoCancellation, noiseSuppression: audio.noiseSuppression });
      await player.setSinkId(audio.speakerDevice);
    } catch (error) {
      conversation.system(`Audio device: ${error.message || error.name}`, "error");
    }
  },
});

async function loadDevices() {
  const [mics, speakers] = await Promise.all([listDevices("audioinput"), listDevices("audiooutput")]);
  settings.devices("audioinput", mics);
  settings.devices("audiooutput", speakers, { supported: "setSinkId" in AudioContext.prototype });
}
if (navigator.mediaDevices) navigator.mediaDevices.addEventListener("devicechange", () => loadDevices().catch(() => {}));

// ---- controls --------------------------------------------------------------------------------

$("new-session").addEventListener("click", () => {
  state.sessionId = newSessionId();
  log.clear();
  log.info("session", `new session ${state.sessionId}`);
  panels.closeSheet();
  openSession({ fresh: true });
  $("text-input").focus();
});

$("modality").addEventListener("change", (e) => {
  state.modality = e.target.value === "TEXT" ? "TEXT" : "AUDIO";
  openSession({ fresh: false });
});

$("user-id").addEventListener("change", (e) => {
  const input = e.target;
  const value = input.value.trim();
  if (!ID_PATTERN.test(value)) {
    input.setAttribute("aria-invalid", "true");
    conversation.system("User id: 1–128 characters of A–Z a–z 0–9 . _ : @ -", "error");
    return;
  }
  input.removeAttribute("aria-invalid");
  if (value === state.userId) return;
  state.userId = value;
  openSession({ fresh: false });
});

$("rec-refresh").addEventListener("click", () => session && recordings.load(session.api, state.userId, state.sessionId));
$("enable-audio").addEventListener("click", () => player.unlock());
$("clear-log").addEventListener("click", () => log.clear());

// Back online: no need to wait for the backoff.
window.addEventListener("online", () => session && session.status === "reconnecting" && session.reconnect());

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  player.unlock(); // a gesture: the moment the browser lets audio start
  const input = $("text-input");
  const text = input.value.trim();
  if (!text || !session) return;
  if (!session.sendText(text)) {
    conversation.system("Not connected: the message was not sent.", "error");
    return;
  }
  pendingText = text;
  conversation.userText(text);
  input.value = "";
});

function setMicUi(on) {
  const button = $("mic");
  button.setAttribute("aria-pressed", String(on));
  button.querySelector(".label").textContent = on ? "Stop mic" : "Start mic";
  $("mute").disabled = !on;
  if (!on) {
    $("level").value = 0;
    microphone.setMuted(false);
    $("mute").setAttribute("aria-pressed", "false");
    $("mute").textContent = "Mute";
  }
  if (activity) activity.update();
}

let micStarting = false;

async function startMic() {
  micStarting = true;
  $("mic").setAttribute("aria-busy", "true");
  try {
    await voice.start();
    setMicUi(true);
    log.info("mic", `microphone on${microphone.deviceLabel ? ": " + microphone.deviceLabel : ""}`);
    loadDevices().catch(() => {}); // labels are known once permission is given
  } catch (error) {
    setMicUi(false);
    conversation.system(`Microphone unavailable: ${error.message || error.name}`, "error");
  } finally {
    micStarting = false;
    $("mic").removeAttribute("aria-busy");
  }
}

function stopMic(notice) {
  if (!microphone.active) return;
  if (voice) voice.stop();
  else microphone.stop();
  setMicUi(false);
  log.info("mic", "microphone off");
  if (notice) conversation.system(notice);
}

$("mic").addEventListener("click", () => {
  player.unlock();
  if (micStarting) return;
  if (microphone.active) stopMic();
  else startMic();
});

$("mute").addEventListener("click", () => {
  const muted = !microphone.muted;
  microphone.setMuted(muted);
  if (muted && session) session.audioStreamEnd();
  $("mute").setAttribute("aria-pressed", String(muted));
  $("mute").textContent = muted ? "Unmute" : "Mute";
  if (activity) activity.update();
});

// Push to talk: hold the button (or the space bar outside the message box).
async function press() {
  if (!voice || voice.talking) return;
  if (!microphone.active) await startMic();
  if (!microphone.active) return;
  voice.talk(true);
  $("ptt").setAttribute("aria-pressed", "true");
}

function release() {
  if (!voice || !voice.talking) return;
  voice.talk(false);
  $("ptt").setAttribute("aria-pressed", "false");
}

$("ptt").addEventListener("pointerdown", (e) => {
  e.preventDefault();
  press();
});
for (const type of ["pointerup", "pointercancel", "pointerleave"]) $("ptt").addEventListener(type, release);
const typing = (e) => e.target.closest && e.target.closest("input, textarea, select, button");
window.addEventListener("keydown", (e) => {
  if (e.code === "Space" && !e.repeat && settings.audio().mode === "pushToTalk" && !typing(e)) {
    e.preventDefault();
    press();
  }
});
window.addEventListener("keyup", (e) => e.code === "Space" && release());

microphone.onChunk = (pcm, level) => {
  livegate.micChunks += 1;
  // connectAudio sent it, unless push-to-talk is not pressed.
  if (voice && (voice.mode === "vad" || voice.talking)) {
    livegate.sentChunks += 1;
    log.sentAudio(pcm.byteLength);
  }
  if (level > VOICE_LEVEL) conversation.noteVoice();
};

// ---- export and delete -----------------------------------------------------------------------

function download(name, type, text) {
  const url = URL.createObjectURL(text instanceof Blob ? text : new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  livegate.lastExport = { name, type, text };
}

async function exportSession(format) {
  try {
    const { events } = await api.history(state.userId, state.sessionId, { max: MAX_EXPORT_EVENTS });
    const base = `livegate-${state.userId}-${state.sessionId}`;
    if (format === "json") {
      const body = { userId: state.userId, sessionId: state.sessionId, exportedAt: new Date().toISOString(), events };
      download(`${base}.json`, "application/json", JSON.stringify(body, null, 2));
    } else {
      download(`${base}.txt`, "text/plain", transcriptToText(transcript(events)));
    }
  } catch (error) {
    conversation.system(`Could not export this session: ${error.message}`, "error");
  }
}

$("export-json").addEventListener("click", () => exportSession("json"));
// The replay bundle (`livegate replay run` takes its folder once unpacked: `tar xf`).
$("export-bundle").addEventListener("click", async () => {
  try {
    const tar = await api.exportBundle(state.userId, state.sessionId);
    download(`${state.sessionId}.tar`, "application/x-tar", tar);
  } catch (error) {
    conversation.system(`Could not export this session: ${error.message}`, "error");
  }
});
$("export-text").addEventListener("click", () => exportSession("text"));

let deleteArmed = 0;
$("delete-session").addEventListener("click", async () => {
  const button = $("delete-session");
  if (!deleteArmed) {
    // Two clicks: the second within 5 s confirms.
    button.textContent = "Delete? Click again";
    deleteArmed = setTimeout(() => {
      deleteArmed = 0;
      button.textContent = "Delete";
    }, 5000);
    return;
  }
  clearTimeout(deleteArmed);
  deleteArmed = 0;
  button.textContent = "Delete";
  const deleted = state.sessionId;
  if (session) session.close();
  try {
    await api.deleteSession(state.userId, deleted);
  } catch (error) {
    if (error.status !== 404) {
      conversation.system(`Could not delete this session: ${error.message}`, "error");
      return;
    }
  }
  log.info("session", `deleted ${deleted}`);
  state.sessionId = newSessionId();
  await openSession({ fresh: true });
});

// ---- start -----------------------------------------------------------------------------------

async function begin() {
  $("signin").hidden = true;
  if (signin.required) {
    const claims = signin.claims;
    state.userId = claims.sub;
    const bound = validId(claims.session_id);
    state.bound = Boolean(bound);
    if (bound) state.sessionId = bound;
  }
  showAccount();
  try {
    livegate.live = await api.liveInfo();
    settings.configure(livegate.live);
    $("model").textContent = livegate.live.model || "";
  } catch (error) {
    log.info("error", `model information unavailable: ${error.message}`);
  }
  $("ptt").hidden = settings.audio().mode !== "pushToTalk";
  loadDevices().catch(() => {});
  const fresh = state.sessionId === null;
  if (fresh) state.sessionId = newSessionId();
  updateControls();
  openSession({ fresh });
}

async function start() {
  signin = new SignIn({
    api,
    onChange(why) {
      if (signin.signedIn) begin();
      else showSignIn(`You signed out (${why}).`);
    },
  });
  await signin.init();
  if (!signin.signedIn) {
    if (!state.sessionId) state.sessionId = newSessionId();
    showIdentity();
    showSignIn(signin.reason());
    return;
  }
  begin();
}

player.unlockOnGesture();
start();
