// The event console: one line per downstream event or upstream message, expandable to JSON,
// filtered by kind (audio chunks hidden by default) and by text.

import { fileName } from "./conversation.js";
import { clockTime } from "./time.js";

const MAX_ENTRIES = 500;

/** The console's filter groups, in the order their checkboxes appear, and the kinds in each. */
export const GROUPS = [
  ["text", "text", ["text", "partial"]],
  ["transcript", "transcripts", ["transcript-in", "transcript-out"]],
  ["audio", "audio", ["audio"]],
  ["tool", "tools", ["tool"]],
  ["turn", "turns", ["turnComplete", "interrupted"]],
  ["usage", "usage", ["usage"]],
  ["file", "recordings", ["file"]],
  ["error", "errors", ["error"]],
  ["sent", "sent", []],
  ["connection", "connection", []],
  ["other", "other", ["event"]],
];
const HIDDEN_BY_DEFAULT = new Set(["audio"]);

/** The filter group of an entry. */
export function groupOf(direction, kind) {
  if (kind === "error") return "error";
  if (direction === "up") return "sent";
  if (direction === "local") return "connection";
  const group = GROUPS.find(([, , kinds]) => kinds.includes(kind));
  return group ? group[0] : "other";
}

/** The kind label of a downstream ADK event. */
export function classify(ev) {
  const parts = (ev.content && Array.isArray(ev.content.parts) && ev.content.parts) || [];
  if (ev.errorCode || ev.errorMessage) return "error";
  if (ev.interrupted === true) return "interrupted";
  if (ev.turnComplete === true) return "turnComplete";
  if (ev.inputTranscription) return "transcript-in";
  if (ev.outputTranscription) return "transcript-out";
  if (parts.some((p) => p.functionCall || p.functionResponse)) return "tool";
  if (parts.some((p) => p.fileData)) return "file";
  if (parts.some((p) => p.inlineData && /^audio\//i.test(p.inlineData.mimeType || ""))) return "audio";
  if (parts.some((p) => typeof p.text === "string")) return ev.partial === true ? "partial" : "text";
  if (ev.usageMetadata) return "usage";
  return "event";
}

function clip(s, max = 120) {
  s = String(s).replace(/\s+/g, " ");
  return s.length > max ? s.slice(0, max - 1) + "…" : s;
}

function summarize(ev, kind, audioBytes) {
  const parts = (ev.content && ev.content.parts) || [];
  const text = parts
    .filter((p) => typeof p.text === "string")
    .map((p) => (p.thought ? "💭 " : "") + p.text)
    .join("");
  switch (kind) {
    case "error":
      return `${ev.errorCode || ""} ${ev.errorMessage || ""}`;
    case "transcript-in":
    case "transcript-out": {
      const t = ev.inputTranscription || ev.outputTranscription;
      return `${t.finished ? "✓ " : ""}${t.text || ""}`;
    }
    case "tool":
      return parts
        .map((p) => (p.functionCall ? `call ${p.functionCall.name}` : p.functionResponse ? `result ${p.functionResponse.name}` : ""))
        .filter(Boolean)
        .join(", ");
    case "file":
      return parts.filter((p) => p.fileData).map((p) => fileName(p.fileData.fileUri || "")).join(", ");
    case "audio": {
      const blob = parts.find((p) => p.inlineData).inlineData;
      return `${blob.mimeType} · ${audioBytes} B`;
    }
    case "turnComplete":
      return ev.turnCompleteReason || "";
    case "event":
      return Object.keys(ev)
        .filter((k) => !["id", "invocationId", "author", "actions", "nodeInfo", "timestamp", "modelVersion"].includes(k))
        .join(", ");
    default: {
      const u = ev.usageMetadata;
      const usage = u ? `tokens ${u.promptTokenCount ?? "?"} in · ${u.candidatesTokenCount ?? "?"} out · ${u.totalTokenCount ?? "?"} total` : "";
      return text || usage;
    }
  }
}

function clock() {
  return clockTime(new Date(), { ms: true });
}

// Long base64 payloads would make the expanded JSON unreadable (and slow to render).
function shorten(key, value) {
  return key === "data" && typeof value === "string" && value.length > 96
    ? `${value.slice(0, 64)}… (${value.length} chars)`
    : value;
}

export class EventLog {
  /**
   * @param {object} o
   * @param {HTMLElement} o.list     the <ol> of entries
   * @param {HTMLElement} o.filters  where the kind checkboxes go
   * @param {HTMLInputElement} o.search  text filter
   * @param {HTMLElement} o.counter  "(shown of total)"
   * @param {HTMLElement} o.stats    audio chunk counters
   * @param {HTMLElement} [o.scroller] the element that scrolls the list (its panel)
   */
  constructor({ list, filters, search, counter, stats, scroller }) {
    this.list = list;
    this.scroller = scroller || list;
    this.counter = counter;
    this.stats = stats;
    this.search = search;
    this.query = "";
    this.hidden = new Set(HIDDEN_BY_DEFAULT);
    this.payloads = new WeakMap(); // li -> payload, stringified only when expanded
    this.audio = { down: 0, downBytes: 0, hidden: 0, up: 0, upBytes: 0 };
    this.statsQueued = false;
    this.countQueued = false;
    list.addEventListener("click", (e) => {
      const head = e.target.closest(".entry-head");
      if (head) this.toggle(head);
    });
    for (const [group, label] of GROUPS) {
      const chip = document.createElement("label");
      chip.className = `chip g-${group}`;
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = group;
      box.checked = !this.hidden.has(group);
      box.addEventListener("change", () => this.setVisible(group, box.checked));
      chip.append(box, ` ${label}`);
      filters.append(chip);
      list.classList.toggle(`hide-${group}`, this.hidden.has(group));
    }
    search.addEventListener("input", () => {
      this.query = search.value.trim().toLowerCase();
      for (const li of list.children) this.applyQuery(li);
      this.renderCount();
    });
  }

  /** Shows or hides a kind group (CSS does the hiding, so nothing is re-rendered). */
  setVisible(group, visible) {
    if (visible) this.hidden.delete(group);
    else this.hidden.add(group);
    this.list.classList.toggle(`hide-${group}`, !visible);
    this.renderCount();
  }

  applyQuery(li) {
    li.classList.toggle("no-match", this.query !== "" && !li.textContent.toLowerCase().includes(this.query));
  }

  toggle(head) {
    const li = head.parentElement;
    const open = head.getAttribute("aria-expanded") !== "true";
    head.setAttribute("aria-expanded", String(open));
    let pre = li.querySelector("pre");
    if (open && !pre) {
      pre = document.createElement("pre");
      pre.textContent = JSON.stringify(this.payloads.get(li), shorten, 2);
      li.append(pre);
    }
    if (pre) pre.hidden = !open;
  }

  add(direction, kind, author, summary, payload) {
    const list = this.list;
    // Follow new entries unless the user scrolled up to read older ones.
    const scroller = this.scroller;
    const pinned = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
    const li = document.createElement("li");
    const group = groupOf(direction, kind);
    li.className = `entry ${direction} k-${kind} g-${group}`;
    li.dataset.group = group;
    const head = document.createElement("button");
    head.type = "button";
    head.className = "entry-head";
    head.setAttribute("aria-expanded", "false");
    const cells = [
      ["dir", direction === "up" ? "↑" : direction === "down" ? "↓" : "•"],
      ["kind", kind],
      ["author", author || ""],
      ["sum", clip(summary || "")],
      ["time", clock()],
    ];
    for (const [cls, text] of cells) {
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = text;
      head.append(span);
    }
    head.querySelector(".dir").setAttribute("aria-label", direction === "up" ? "sent" : direction === "down" ? "received" : "connection");
    li.append(head);
    this.payloads.set(li, payload);
    if (this.query) this.applyQuery(li);
    list.append(li);
    while (list.childElementCount > MAX_ENTRIES) list.firstElementChild.remove();
    if (pinned) scroller.scrollTop = scroller.scrollHeight;
    this.updateCount();
  }

  // Throttled to one count per frame: entries can arrive 50+ times a second.
  updateCount() {
    if (this.countQueued) return;
    this.countQueued = true;
    requestAnimationFrame(() => {
      this.countQueued = false;
      this.renderCount();
    });
  }

  /** Writes "(shown of total)" now; filter changes use it so the count never lags what is shown. */
  renderCount() {
    const total = this.list.childElementCount;
    let shown = 0;
    for (const li of this.list.children) {
      if (!this.hidden.has(li.dataset.group) && !li.classList.contains("no-match")) shown += 1;
    }
    this.counter.textContent = shown === total ? `(${total})` : `(${shown} of ${total})`;
  }

  /** A downstream event; `audioBytes` is the PCM that came with it (binary frame or base64). */
  event(ev, audioBytes = 0) {
    const kind = classify(ev);
    if (kind === "audio") {
      this.audio.down += 1;
      this.audio.downBytes += audioBytes;
      this.updateStats();
      // Audio chunks arrive ~25-50 per second; logging them while hidden would push everything
      // else out of the console, so they are only listed while their filter is on.
      if (this.hidden.has("audio")) {
        this.audio.hidden += 1;
        return;
      }
    }
    this.add("down", kind, ev.author, summarize(ev, kind, audioBytes), ev);
  }

  /** An upstream JSON message. */
  sent(message) {
    this.add("up", "send", "you", `${message.type}${message.text ? ": " + message.text : ""}`, message);
  }

  /** An upstream microphone chunk (counted, not listed). */
  sentAudio(bytes) {
    this.audio.up += 1;
    this.audio.upBytes += bytes;
    this.updateStats();
  }

  /** Connection open/close and other client-side happenings. */
  info(kind, summary, payload = {}) {
    this.add("local", kind, "", summary, payload);
  }

  clear() {
    this.list.replaceChildren();
    this.updateCount();
  }

  // Throttled to one DOM update per frame: audio counters change 50+ times a second.
  updateStats() {
    if (this.statsQueued) return;
    this.statsQueued = true;
    requestAnimationFrame(() => {
      this.statsQueued = false;
      const a = this.audio;
      const kb = (n) => (n / 1024).toFixed(n < 10240 ? 1 : 0);
      this.stats.textContent = `↓ audio ${a.down} chunks, ${kb(a.downBytes)} KiB · ↑ mic ${a.up} chunks, ${kb(a.upBytes)} KiB`;
    });
  }
}
