// Renders ADK events as a conversation and keeps the state of the current model turn.
//
// Bubble classes (stable, used by browser tests):
//   .msg.user                     a message the user typed
//   .msg.user.transcript          what the user said (inputTranscription)
//   .msg.agent                    the model's text answer
//   .msg.agent.transcript         what the model said (outputTranscription)
//   .final                        the bubble will not change any more
//   .interrupted                  the answer was cut off by barge-in
//   .msg.system(.error)           connection notices and errors
// A bubble's text lives in its first child (span.text), so its textContent is exactly the message;
// icons, the typing dots and the "interrupted" tag are CSS or aria-hidden decorations.

function joinedText(parts) {
  // Thoughts are the model's reasoning, not its answer.
  return parts
    .filter((p) => typeof p.text === "string" && p.thought !== true)
    .map((p) => p.text)
    .join("");
}

function compactJson(value, max = 160) {
  let s;
  try {
    s = JSON.stringify(value ?? {});
  } catch {
    s = String(value);
  }
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

export function fileName(uri) {
  return String(uri).split("#")[0].split("/").pop() || String(uri);
}

export class Conversation {
  constructor(element) {
    this.el = element;
    this.clear();
  }

  clear() {
    this.el.replaceChildren();
    this.turn = this.newTurn();
    this.userTranscript = null;
    this.lastSentText = null;
    this.lastTurn = null; // the finished turn's caption, for usage that arrives after turnComplete
    // Moments the user finished asking something, for the "first response in" latency.
    this.anchors = { text: -Infinity, voice: -Infinity, heard: -Infinity };
    this.consumedAt = performance.now(); // anchors older than the last answer's start are stale
  }

  newTurn() {
    return { text: null, transcript: null, bubbles: [], firstAt: null, anchor: null, usage: null };
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

  bubble(classes, text = "", { typing = false, before = null } = {}) {
    const div = document.createElement("div");
    div.className = `msg ${classes}`;
    const span = document.createElement("span");
    span.className = "text";
    span.textContent = text;
    div.append(span);
    if (typing) {
      const dots = document.createElement("span");
      dots.className = "typing";
      dots.setAttribute("aria-hidden", "true");
      dots.append(document.createElement("i"), document.createElement("i"), document.createElement("i"));
      div.append(dots);
    }
    this.mutate(() => (before ? before.before(div) : this.el.append(div)));
    return div;
  }

  setText(bubble, text) {
    this.mutate(() => (bubble.firstElementChild.textContent = text));
  }

  appendText(bubble, text) {
    this.mutate(() => bubble.firstElementChild.append(text));
  }

  stopTyping(bubble) {
    const dots = bubble.querySelector(".typing");
    if (dots) dots.remove();
  }

  finalize(bubble) {
    this.stopTyping(bubble);
    bubble.classList.add("final");
  }

  system(text, kind = "info") {
    const div = document.createElement("div");
    div.className = `msg system ${kind}`;
    div.textContent = text;
    this.mutate(() => this.el.append(div));
    return div;
  }

  note(kind, text, title = "") {
    const div = document.createElement("div");
    div.className = `note ${kind}`;
    div.textContent = text;
    if (title) div.title = title;
    this.mutate(() => this.el.append(div));
  }

  // ---- user side -----------------------------------------------------------------------------

  /** The user typed and sent `text`. */
  userText(text) {
    this.bubble("user final", text);
    this.lastSentText = text;
    this.anchors.text = performance.now();
  }

  /** The microphone heard speech now (level above threshold). */
  noteVoice(now = performance.now()) {
    this.anchors.voice = now;
  }

  // ---- model turn ----------------------------------------------------------------------------

  /** First text/audio/transcript of an answer: fixes the latency of this turn. */
  firstResponse(now = performance.now()) {
    const turn = this.turn;
    if (turn.firstAt !== null) return;
    turn.firstAt = now;
    // The latest moment the user finished asking, among those since the previous answer began.
    const candidates = Object.values(this.anchors).filter((t) => t > this.consumedAt && t <= now);
    turn.anchor = candidates.length ? Math.max(...candidates) : null;
    this.consumedAt = now;
  }

  agentBubble(classes) {
    const b = this.bubble(`agent ${classes}`.trim(), "", { typing: true });
    this.turn.bubbles.push(b);
    return b;
  }

  agentText(text, complete, now) {
    if (!text && !complete) return;
    this.firstResponse(now);
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
        const before = this.turn.bubbles[0] || null;
        this.userTranscript = this.bubble("user transcript", "", { before });
      }
      const b = this.userTranscript;
      if (finished) {
        if (text) this.setText(b, text);
        this.finalize(b);
        this.userTranscript = null;
        this.anchors.heard = now;
      } else {
        this.appendText(b, text);
      }
      return;
    }
    if (!this.turn.transcript) {
      if (!text) return;
      this.turn.transcript = this.agentBubble("transcript");
    }
    this.firstResponse(now);
    const b = this.turn.transcript;
    if (finished) {
      if (text) this.setText(b, text);
      this.finalize(b);
      this.turn.transcript = null;
    } else {
      this.appendText(b, text);
    }
  }

  usage(u) {
    const turn = this.turn;
    const started = turn.firstAt !== null || turn.bubbles.length > 0;
    if (!started && this.lastTurn && !this.lastTurn.usage) {
      // Usage reported after turnComplete belongs to the turn that just ended.
      this.lastTurn.usage = u;
      this.renderCaption(this.lastTurn);
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
      this.lastTurn = {
        latency: turn.firstAt !== null && turn.anchor !== null ? Math.round(turn.firstAt - turn.anchor) : null,
        usage: turn.usage,
        anchor: turn.bubbles[turn.bubbles.length - 1] || null,
        audioOnly: turn.bubbles.length === 0,
        caption: null,
      };
      this.renderCaption(this.lastTurn);
    }
    this.turn = this.newTurn();
  }

  /** Connection lost mid-turn: stop the typing dots, keep the text, no caption. */
  abortTurn() {
    for (const b of this.turn.bubbles) this.finalize(b);
    if (this.userTranscript) this.finalize(this.userTranscript);
    this.userTranscript = null;
    this.turn = this.newTurn();
  }

  renderCaption(info) {
    const bits = [];
    if (info.latency !== null) bits.push(`first response in ${info.latency} ms`);
    const u = info.usage;
    if (u) {
      bits.push(
        `tokens: ${u.promptTokenCount ?? "?"} in · ${u.candidatesTokenCount ?? "?"} out · ${u.totalTokenCount ?? "?"} total`,
      );
    }
    if (!bits.length) return;
    if (info.audioOnly) bits.unshift("🔊 audio answer");
    if (!info.caption) {
      info.caption = document.createElement("div");
      info.caption.className = "caption";
      this.mutate(() => (info.anchor && info.anchor.isConnected ? info.anchor.after(info.caption) : this.el.append(info.caption)));
    }
    info.caption.textContent = bits.join(" · ");
  }

  // ---- dispatch ------------------------------------------------------------------------------

  /** Applies one downstream ADK event (audio is played by the caller, not here). */
  handleEvent(ev, now = performance.now()) {
    const parts = (ev.content && Array.isArray(ev.content.parts) && ev.content.parts) || [];
    const fromUser = ev.author === "user" || (ev.content && ev.content.role === "user");

    if (ev.errorCode || ev.errorMessage) {
      this.system(`${ev.errorCode || "ERROR"}: ${ev.errorMessage || "(no message)"}`, "error");
    }

    const text = joinedText(parts);
    const hasText = parts.some((p) => typeof p.text === "string" && p.thought !== true);
    if (hasText) {
      if (fromUser) {
        // The user's own typed turn echoed back: already shown when it was sent.
        if (text !== this.lastSentText) this.bubble("user final", text);
      } else {
        this.agentText(text, ev.partial !== true, now);
      }
    }

    for (const p of parts) {
      if (p.functionCall) {
        const c = p.functionCall;
        this.note("tool", `🔧 ${c.name}(${compactJson(c.args)})`);
      }
      if (p.functionResponse) {
        const r = p.functionResponse;
        this.note("tool", `↩ ${r.name} → ${compactJson(r.response)}`);
      }
      if (p.fileData && p.fileData.fileUri) {
        this.note("file", `💾 recording saved: ${fileName(p.fileData.fileUri)}`, p.fileData.fileUri);
      }
    }

    if (ev.inputTranscription) this.transcription(ev.inputTranscription, true, now);
    if (ev.outputTranscription) this.transcription(ev.outputTranscription, false, now);
    if (ev.usageMetadata) this.usage(ev.usageMetadata);
    // Merged text may carry `interrupted: false`; only `true` means barge-in.
    if (ev.interrupted === true) this.interrupted();
    if (ev.turnComplete === true && ev.interrupted !== true) this.finishTurn();
  }
}
