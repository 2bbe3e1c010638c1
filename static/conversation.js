// Renders ADK events as a conversation and keeps the state of the current model turn.
//
// Classes (stable, used by browser tests):
//   .msg.user                     a message the user typed
//   .msg.user.transcript          what the user said (inputTranscription)
//   .msg.agent                    the model's text answer
//   .msg.agent.transcript         what the model said (outputTranscription)
//   .final                        the bubble will not change any more
//   .interrupted                  the answer was cut off by barge-in
//   .history                      rendered from the session's stored events, not live
//   .msg.system(.error)           connection notices and errors
//   .msg.agent.voice              a spoken answer without a transcript (transcription off)
//   .ended[data-ended]            an answer cut by a reconnect ("settings changed", "connection lost")
//   .tool(.pending|.background|.error|.cancelled)  a function call and its response (or its
//                                  cancellation); .background: the agent goes on while it runs
//   .caption                      a turn's latency and token usage
//   .caption .model               which model answered (the events' modelVersion)
// A bubble's text lives in its span.text, so its textContent is exactly the message; icons, the
// typing dots and the "interrupted" tag are text-free SVG, CSS or aria-hidden decorations.

import { typedEvents } from "/lib/index.js";
import { icon } from "./icons.js";

/** `text` with `code` spans as <code> elements (no raw backticks on screen). */
export function withCode(text) {
  return String(text)
    .split(/`([^`]+)`/)
    .map((piece, i) => {
      if (i % 2 === 0) return piece;
      const code = document.createElement("code");
      code.textContent = piece;
      return code;
    });
}

function clip(s, max) {
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

function compactJson(value, max = 160) {
  let s;
  try {
    s = JSON.stringify(value ?? {});
  } catch {
    s = String(value);
  }
  return clip(s, max);
}

/** A value as a person reads it: strings bare, everything else as compact JSON. */
function plain(value, max = 80) {
  return typeof value === "string" ? clip(value, max) : compactJson(value, max);
}

/** `name(key: value, …)` for a function call's arguments. */
function callSignature(call) {
  const args = call.args && typeof call.args === "object" ? call.args : {};
  const inner = Object.entries(args)
    .map(([k, v]) => `${k}: ${compactJson(v, 60)}`)
    .join(", ");
  return `${call.name || "function"}(${clip(inner, 160)})`;
}

export function fileName(uri) {
  return String(uri).split("#")[0].split("/").pop() || String(uri);
}

const MAX_RESULT_FIELDS = 6;

export class Conversation {
  /**
   * @param {HTMLElement} element  the messages container
   * @param {object} [o]
   * @param {(turn: object) => void} [o.onTurn]  a model turn ended: {latencyMs, from, first, usage, interrupted}
   * @param {(text: string) => void} [o.onUserText]  the user said or typed something (a title)
   * @param {() => void} [o.onRecordingTurn]  a recording's turn became known
   */
  constructor(element, { onTurn, onUserText, onRecordingTurn } = {}) {
    this.el = element;
    this.onTurn = onTurn || (() => {});
    this.onUserText = onUserText || (() => {});
    this.onRecordingTurn = onRecordingTurn || (() => {});
    this.clear();
  }

  /** The element of the turn a recording belongs to, if it is on screen. */
  turnOf(name) {
    const el = this.recordings.get(name);
    return el && el.isConnected ? el : null;
  }

  clear() {
    this.el.replaceChildren();
    this.turn = this.newTurn();
    this.userTranscript = null;
    this.lastSentText = null;
    this.lastTurn = null; // the finished turn's caption, for usage that arrives after turnComplete
    this.tools = new Map(); // function call id -> its card, until the response arrives
    // Moments the user finished asking something, for the "first response in" latency.
    this.anchors = { text: -Infinity, speech: -Infinity, transcript: -Infinity };
    this.consumedAt = performance.now(); // anchors older than the last answer's start are stale
    this.history = false;
    this.recordings = new Map(); // recording name -> an element of its turn
    this.lastUser = null; // the latest user bubble (typed or spoken)
    this.lastSystem = null; // the latest system line, to count repeats instead of stacking them
  }

  newTurn() {
    return { text: null, transcript: null, voice: null, voiceSeconds: 0, bubbles: [], firstEl: null, firstAt: null, audioAt: null, anchor: null, usage: null, model: null };
  }

  // ---- DOM helpers ---------------------------------------------------------------------------

  /** Runs `fn`, then keeps the view pinned to the bottom if it was there (not if the user scrolled up). */
  mutate(fn) {
    const el = this.el;
    const pinned = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
    const result = fn();
    if (pinned) el.scrollTop = el.scrollHeight;
    return result;
  }

  place(node, before = null) {
    if (this.history) node.classList.add("history");
    this.mutate(() => (before && before.isConnected ? before.before(node) : this.el.append(node)));
  }

  bubble(classes, text = "", { typing = false, before = null } = {}) {
    const div = document.createElement("div");
    div.className = `msg ${classes}`;
    const span = document.createElement("span");
    span.className = "text";
    span.textContent = text;
    if (/\btranscript\b/.test(classes)) div.append(icon(/\buser\b/.test(classes) ? "mic" : "speaker", "icon lead"));
    div.append(span);
    if (typing) {
      // Screen readers wait for the finished text instead of hearing every fragment.
      div.setAttribute("aria-busy", "true");
      const dots = document.createElement("span");
      dots.className = "typing";
      dots.setAttribute("aria-hidden", "true");
      dots.append(document.createElement("i"), document.createElement("i"), document.createElement("i"));
      div.append(dots);
    }
    this.place(div, before);
    return div;
  }

  setText(bubble, text) {
    this.mutate(() => (bubble.querySelector(":scope > .text").textContent = text));
  }

  appendText(bubble, text) {
    this.mutate(() => bubble.querySelector(":scope > .text").append(text));
  }

  stopTyping(bubble) {
    const dots = bubble.querySelector(".typing");
    if (dots) dots.remove();
    bubble.removeAttribute("aria-busy");
  }

  finalize(bubble) {
    this.stopTyping(bubble);
    bubble.classList.add("final");
  }

  system(text, kind = "info") {
    const last = this.lastSystem;
    if (last && last.isConnected && last.dataset.text === text && last === this.el.lastElementChild) {
      // The same notice again: counted, not stacked.
      const times = Number(last.dataset.times || 1) + 1;
      last.dataset.times = String(times);
      last.querySelector(".times").textContent = ` ×${times}`;
      return last;
    }
    const div = document.createElement("div");
    div.className = `msg system ${kind}`;
    div.dataset.text = text;
    const times = document.createElement("span");
    times.className = "times";
    div.append(...withCode(text), times);
    this.place(div);
    this.lastSystem = div;
    return div;
  }

  divider(text) {
    const div = document.createElement("div");
    div.className = "divider";
    div.setAttribute("role", "separator");
    div.textContent = text;
    this.mutate(() => this.el.append(div));
  }

  // ---- history -------------------------------------------------------------------------------

  /** Renders a session's stored events (oldest first) above anything live. */
  renderHistory(events, total) {
    if (!events.length) return;
    this.el.setAttribute("aria-busy", "true"); // one announcement, not one per message
    this.divider("Earlier in this session");
    if (total > events.length) this.system(`${total - events.length} older events not shown.`);
    this.history = true;
    try {
      for (const ev of events) this.handleEvent(ev);
      this.abortTurn();
    } finally {
      this.history = false;
      this.el.removeAttribute("aria-busy");
    }
    this.divider("Now");
    this.el.scrollTop = this.el.scrollHeight;
    this.consumedAt = performance.now();
  }

  // ---- user side -----------------------------------------------------------------------------

  /** The user typed and sent `text`. */
  userText(text) {
    this.lastUser = this.bubble("user final", text);
    this.onUserText(text);
    this.lastSentText = text;
    this.anchors.text = performance.now();
  }

  /** The microphone heard speech now (level above threshold): the latest is the end of speech. */
  noteVoice(now = performance.now()) {
    this.anchors.speech = now;
  }

  // ---- model turn ----------------------------------------------------------------------------

  /**
   * Text or audio of an answer arrived. The first fixes what the turn's latency is measured from;
   * the latency itself runs to the first audio (what a listener waits for), or the first text when
   * the answer has no audio.
   */
  firstResponse(kind, now = performance.now()) {
    const turn = this.turn;
    if (this.history) return;
    if (kind === "audio" && turn.audioAt === null) turn.audioAt = now;
    if (turn.firstAt !== null) return;
    turn.firstAt = now;
    // The latest moment the user finished asking, among those since the previous answer began:
    // the end of their speech or the moment they sent text; the transcript only if neither.
    const fresh = (t) => t > this.consumedAt && t <= now;
    const { text, speech, transcript } = this.anchors;
    if (fresh(text) || fresh(speech)) {
      turn.anchor = fresh(text) && (!fresh(speech) || text > speech) ? { at: text, from: "text" } : { at: speech, from: "speech" };
    } else if (fresh(transcript)) {
      turn.anchor = { at: transcript, from: "transcript" };
    }
    this.consumedAt = now;
  }

  /** Marks the start of the model's part of the turn (for placing the user's transcript before it). */
  turnElement(el) {
    if (!this.turn.firstEl) this.turn.firstEl = el;
  }

  agentBubble(classes) {
    const b = this.bubble(`agent ${classes}`.trim(), "", { typing: !this.history });
    this.turn.bubbles.push(b);
    this.turnElement(b);
    return b;
  }

  agentText(text, complete, now) {
    if (!text && !complete) return;
    this.firstResponse("text", now);
    let b = this.turn.text;
    if (!b) b = this.turn.text = this.agentBubble("");
    if (complete) {
      // The merged full text of the streamed partials: replace, never append.
      this.setText(b, text);
      this.stopTyping(b);
      this.turn.text = null; // later text in this turn (e.g. after a tool call) gets a new bubble
    } else {
      this.appendText(b, text);
    }
  }

  transcription(t, input, now) {
    const text = typeof t.text === "string" ? t.text : "";
    const finished = t.finished === true;
    if (input) {
      if (!this.userTranscript) {
        if (!text) return;
        // Speech is usually transcribed after the answer began: put it before that answer.
        this.userTranscript = this.bubble("user transcript", "", { before: this.turn.firstEl });
      }
      const b = this.userTranscript;
      if (finished) {
        if (text) this.setText(b, text);
        this.finalize(b);
        this.userTranscript = null;
        this.lastUser = b;
        this.onUserText(b.querySelector(".text").textContent);
        this.anchors.transcript = now;
      } else {
        this.appendText(b, text);
      }
      return;
    }
    if (!this.turn.transcript) {
      if (!text) return;
      const voice = this.turn.voice;
      if (voice) {
        // The spoken answer's bubble becomes its transcript.
        voice.classList.replace("voice", "transcript");
        voice.querySelector(".lead").replaceWith(icon("speaker", "icon lead"));
        this.setText(voice, "");
        this.turn.voice = null;
        this.turn.transcript = voice;
      } else {
        this.turn.transcript = this.agentBubble("transcript");
      }
    }
    this.firstResponse("text", now);
    const b = this.turn.transcript;
    if (finished) {
      if (text) this.setText(b, text);
      this.finalize(b);
      this.turn.transcript = null;
    } else {
      this.appendText(b, text);
    }
  }

  /**
   * Audio of the answer arrived (`seconds` long). Until a transcript comes (with transcription
   * off, none does), a bubble says an answer is being spoken, and how long it was.
   */
  spoken(seconds, now = performance.now()) {
    this.firstResponse("audio", now);
    const turn = this.turn;
    if (turn.transcript || turn.text) return;
    if (!turn.voice) {
      turn.voice = this.agentBubble("voice");
      turn.voice.querySelector(".text").before(icon("speaker", "icon lead"));
    }
    turn.voiceSeconds += seconds;
    this.setText(turn.voice, `Spoken answer · ${turn.voiceSeconds.toFixed(1)} s`);
  }

  // ---- tools ---------------------------------------------------------------------------------

  toolCall(call) {
    const card = document.createElement("div");
    card.className = "tool pending";
    const head = document.createElement("div");
    head.className = "tool-head";
    const label = document.createElement("span");
    label.className = "visually-hidden";
    label.textContent = "Tool call: ";
    const sig = document.createElement("code");
    sig.className = "tool-call";
    sig.textContent = callSignature(call);
    head.append(icon("tool", "icon tool-icon"), label, sig);
    const result = document.createElement("div");
    result.className = "tool-result";
    // A call the model does not wait for runs while the agent goes on talking.
    if (call.background) card.classList.add("background");
    result.textContent = this.history ? "no result recorded" : call.background ? "running in the background…" : "running…";
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = "JSON";
    const pre = document.createElement("pre");
    details.append(summary, pre);
    details.addEventListener("toggle", () => {
      if (details.open) pre.textContent = JSON.stringify(card.payload, null, 2);
    });
    card.payload = { functionCall: call };
    card.append(head, result, details);
    this.place(card, null);
    this.turnElement(card);
    if (call.id) this.tools.set(call.id, card);
    else this.tools.set(`name:${call.name}`, card);
    return card;
  }

  /** The model (or an interruption) cancelled these calls. */
  toolCancelled(ids) {
    for (const id of ids) {
      const card = this.tools.get(id);
      if (!card) continue;
      this.tools.delete(id);
      card.classList.remove("pending");
      card.classList.add("cancelled");
      card.querySelector(".tool-result").textContent = "cancelled";
    }
  }

  toolResponse(response) {
    const key = response.id && this.tools.has(response.id) ? response.id : `name:${response.name}`;
    const card = this.tools.get(key) || this.toolCall({ name: response.name, id: response.id, args: {} });
    this.tools.delete(key);
    this.tools.delete(response.id);
    card.classList.remove("pending");
    card.payload.functionResponse = response;
    const value = response.response;
    const result = card.querySelector(".tool-result");
    result.replaceChildren();
    const arrow = document.createElement("span");
    arrow.setAttribute("aria-hidden", "true");
    arrow.textContent = "↳ ";
    const label = document.createElement("span");
    label.className = "visually-hidden";
    label.textContent = "Result: ";
    result.append(arrow, label);
    if (value && typeof value === "object" && !Array.isArray(value)) {
      if ("error" in value) card.classList.add("error");
      const entries = Object.entries(value);
      const dl = document.createElement("dl");
      dl.className = "kv";
      const pair = (key, value) => {
        const div = document.createElement("div");
        const dt = document.createElement("dt");
        dt.textContent = key;
        const dd = document.createElement("dd");
        dd.textContent = value;
        div.append(dt, dd);
        dl.append(div);
      };
      for (const [k, v] of entries.slice(0, MAX_RESULT_FIELDS)) pair(k, plain(v));
      if (entries.length > MAX_RESULT_FIELDS) pair("+", `${entries.length - MAX_RESULT_FIELDS} more in JSON`);
      result.append(dl);
    } else {
      result.append(plain(value, 200));
    }
    const pre = card.querySelector("pre");
    if (card.querySelector("details").open) pre.textContent = JSON.stringify(card.payload, null, 2);
  }

  // ---- turn end ------------------------------------------------------------------------------

  usage(u) {
    const turn = this.turn;
    const started = turn.firstAt !== null || turn.bubbles.length > 0;
    if (!started && this.lastTurn && !this.lastTurn.usage) {
      // Usage reported after turnComplete belongs to the turn that just ended.
      this.lastTurn.usage = u;
      this.renderCaption(this.lastTurn);
      this.onTurn(this.turnInfo(this.lastTurn));
    } else {
      turn.usage = u;
    }
  }

  interrupted() {
    for (const b of this.turn.bubbles) b.classList.add("interrupted");
    this.finishTurn({ interrupted: true });
  }

  /** turnComplete (or interrupted): finalize the bubbles, show latency and usage, reset. */
  finishTurn({ interrupted = false } = {}) {
    const turn = this.turn;
    for (const b of turn.bubbles) this.finalize(b);
    if (!interrupted && this.userTranscript) {
      this.finalize(this.userTranscript);
      this.userTranscript = null;
    }
    const started = turn.firstAt !== null || turn.bubbles.length > 0;
    if (started || turn.usage) {
      const reached = turn.audioAt ?? turn.firstAt;
      this.lastTurn = {
        latency: reached !== null && turn.anchor ? Math.round(reached - turn.anchor.at) : null,
        from: turn.anchor ? turn.anchor.from : null,
        first: turn.audioAt !== null ? "audio" : "text",
        usage: turn.usage,
        model: turn.model,
        interrupted,
        anchor: turn.bubbles[turn.bubbles.length - 1] || null,
        caption: null,
      };
      this.renderCaption(this.lastTurn);
      if (!this.history) this.onTurn(this.turnInfo(this.lastTurn));
    }
    this.turn = this.newTurn();
  }

  turnInfo(t) {
    return { latencyMs: t.latency, from: t.from, first: t.first, usage: t.usage || null, interrupted: t.interrupted };
  }

  /**
   * The answer ended without turnComplete: a reconnect (new settings) or a lost connection. Its
   * bubbles keep their text and say why they ended; no caption.
   */
  abortTurn(reason = null) {
    const why = { settings: "ended: settings changed", reconnect: "ended: reconnected", dropped: "cut off: connection lost" }[reason];
    for (const b of this.turn.bubbles) {
      this.finalize(b);
      if (why && !b.classList.contains("interrupted")) {
        b.classList.add("ended");
        b.dataset.ended = why;
      }
    }
    if (this.userTranscript) this.finalize(this.userTranscript);
    this.userTranscript = null;
    this.turn = this.newTurn();
  }

  renderCaption(info) {
    const bits = [];
    if (info.latency !== null) {
      const from = { speech: "end of speech", text: "sending", transcript: "transcript" }[info.from];
      const to = info.first === "audio" ? "first audio" : "first text";
      bits.push(`${info.latency} ms from ${from} to ${to}`);
    }
    const u = info.usage;
    if (u) {
      bits.push(`tokens ${u.promptTokenCount ?? "?"} in · ${u.candidatesTokenCount ?? "?"} out · ${u.totalTokenCount ?? "?"} total`);
    }
    if (!bits.length && !info.model) return;
    if (!info.caption) {
      const caption = (info.caption = document.createElement("div"));
      caption.className = "caption";
      if (this.history) caption.classList.add("history");
      const model = document.createElement("span");
      model.className = "model";
      caption.append(icon("clock"), model, document.createElement("span"));
      this.mutate(() => (info.anchor && info.anchor.isConnected ? info.anchor.after(caption) : this.el.append(caption)));
    }
    const model = info.caption.querySelector(":scope > .model");
    model.textContent = info.model || "";
    model.hidden = !info.model;
    info.caption.lastElementChild.textContent = bits.join(" · ");
  }

  // ---- dispatch ------------------------------------------------------------------------------

  /** Applies one downstream ADK event (audio is played, and reported with spoken(), by the caller). */
  handleEvent(ev, now = performance.now()) {
    const fromUser = ev.author === "user" || (ev.content && ev.content.role === "user");
    // Which model answered: the sim, Gemini or OpenAI, as the agent is configured.
    if (!fromUser && typeof ev.modelVersion === "string" && ev.modelVersion) this.turn.model = ev.modelVersion;
    for (const t of typedEvents(ev)) this.apply(t, now);
  }

  apply(t, now) {
    switch (t.type) {
      case "error":
        this.system(`${t.code}: ${t.message || "(no message)"}`, "error");
        break;
      case "text":
        if (t.fromUser) {
          // The user's own typed turn echoed back live: already shown when it was sent.
          if (this.history || t.text !== this.lastSentText) {
            this.lastUser = this.bubble("user final", t.text);
            this.onUserText(t.text);
          }
          if (!this.history) this.lastSentText = null;
        } else {
          this.agentText(t.text, !t.partial, now);
        }
        break;
      case "toolCall":
        this.toolCall({ id: t.id, name: t.name, args: t.args, background: t.background });
        break;
      case "toolResult":
        this.toolResponse({ id: t.id, name: t.name, response: t.response });
        break;
      case "toolCancelled":
        this.toolCancelled(t.ids);
        break;
      case "recording":
        this.noteRecording(t);
        break;
      case "inputTranscription":
      case "outputTranscription":
        this.transcription(t, t.type === "inputTranscription", now);
        break;
      case "usage":
        this.usage(t.usage);
        break;
      case "interrupted":
        this.interrupted();
        break;
      case "turnComplete":
        if (t.event.interrupted !== true) this.finishTurn();
        break;
    }
  }

  /** A recording was announced: remember which turn it belongs to. */
  noteRecording(r) {
    const turn = this.turn.bubbles.length ? this.turn.bubbles[this.turn.bubbles.length - 1] : null;
    const el = r.side === "input" ? this.lastUser : turn || (this.lastTurn && this.lastTurn.anchor);
    if (!el) return;
    this.recordings.set(r.name, el);
    this.onRecordingTurn();
  }

  /** Scrolls to a turn's element and highlights it for a moment. */
  show(el) {
    el.scrollIntoView({ block: "center" });
    el.classList.add("flash");
    setTimeout(() => el.classList.remove("flash"), 1600);
  }
}
