// The user's sessions (most recent first), each with a title — its first message, read once from
// its stored events and remembered in localStorage — and its age; the current one is marked, and
// is listed even before the gateway has stored it.

import { transcript } from "/lib/index.js";
import { dayOf } from "./time.js";

const TITLES_KEY = "livegate.titles";
const MAX_TITLE = 60;
const MAX_LOOKUPS = 20; // sessions whose first events are read per refresh
const MAX_TITLES = 500;

function ago(seconds) {
  if (!Number.isFinite(seconds)) return "";
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 45) return "just now";
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return dayOf(new Date(seconds * 1000));
}

/** A session's title from its events: the first thing the user said or typed. */
export function titleOf(events) {
  const first = transcript(events).find((l) => l.role === "user");
  if (!first) return null;
  const text = first.text.replace(/\s+/g, " ").trim();
  return text.length > MAX_TITLE ? text.slice(0, MAX_TITLE - 1) + "…" : text;
}

export class SessionList {
  /**
   * @param {object} o
   * @param {HTMLElement} o.list
   * @param {import("/lib/index.js").GatewayApi} o.api
   * @param {(sessionId: string) => void} o.onPick
   * @param {(message: string) => void} o.onError
   */
  constructor({ list, api, onPick, onError }) {
    this.list = list;
    this.api = api;
    this.onError = onError;
    this.userId = null;
    this.sessions = [];
    this.current = null;
    this.generation = 0;
    this.failed = false;
    this.disabled = false;
    try {
      this.titles = JSON.parse(localStorage.getItem(TITLES_KEY) || "{}") || {};
    } catch {
      this.titles = {};
    }
    list.addEventListener("click", (e) => {
      const button = e.target.closest("button.session-open");
      if (button && !this.disabled && button.dataset.id !== this.current) onPick(button.dataset.id);
    });
  }

  key(sessionId) {
    return `${this.userId}/${sessionId}`;
  }

  title(sessionId) {
    return this.titles[this.key(sessionId)] || null;
  }

  /** Remembers a session's title (from its first message, live or stored). */
  setTitle(sessionId, title) {
    if (!title || this.title(sessionId)) return;
    this.titles[this.key(sessionId)] = title;
    const keys = Object.keys(this.titles);
    if (keys.length > MAX_TITLES) delete this.titles[keys[0]];
    try {
      localStorage.setItem(TITLES_KEY, JSON.stringify(this.titles));
    } catch {
      /* storage off */
    }
    this.render();
  }

  setCurrent(userId, sessionId) {
    this.userId = userId;
    this.current = sessionId;
    this.render();
  }

  setDisabled(disabled) {
    this.disabled = disabled;
    this.render();
  }

  /** Reloads the list; errors are reported once until a load works again. */
  async refresh() {
    const generation = ++this.generation;
    try {
      const sessions = await this.api.listSessions(this.userId);
      if (generation !== this.generation) return;
      this.sessions = sessions;
      this.failed = false;
    } catch (error) {
      if (generation !== this.generation) return;
      if (!this.failed) this.onError(`Could not list sessions: ${error.message}`);
      this.failed = true;
      this.sessions = [];
    }
    this.render();
    this.lookUpTitles(generation);
  }

  async lookUpTitles(generation) {
    const missing = this.sessions.filter((s) => !this.title(s.id)).slice(0, MAX_LOOKUPS);
    for (const s of missing) {
      if (generation !== this.generation) return;
      try {
        const { events } = await this.api.events(this.userId, s.id, { offset: 0, limit: 20 });
        const title = titleOf(events);
        if (title) this.setTitle(s.id, title);
      } catch {
        /* untitled: its id is shown */
      }
    }
  }

  render() {
    const rows = this.sessions.map((s) => ({ id: s.id, when: ago(Number(s.lastUpdateTime)), usage: usageText(s.usage) }));
    if (this.current && !rows.some((r) => r.id === this.current)) rows.unshift({ id: this.current, when: "new" });
    this.list.replaceChildren(
      ...rows.map((row) => {
        const li = document.createElement("li");
        li.className = "session";
        const button = document.createElement("button");
        button.type = "button";
        button.className = "session-open";
        button.dataset.id = row.id;
        button.disabled = this.disabled && row.id !== this.current;
        if (row.id === this.current) button.setAttribute("aria-current", "true");
        const title = document.createElement("span");
        title.className = "session-title";
        title.textContent = this.title(row.id) || (row.when === "new" ? "New conversation" : "Untitled");
        const meta = document.createElement("span");
        meta.className = "session-meta muted small";
        meta.textContent = [row.id, row.when, row.usage].filter(Boolean).join(" · ");
        button.append(title, meta);
        li.append(button);
        return li;
      }),
    );
  }
}

/** A session's usage totals (`usage` in the REST summary) in a few words, or "" when none. */
function usageText(usage) {
  if (!usage || !(usage.totalTokens || usage.inputTokens || usage.audioSecondsIn || usage.audioSecondsOut)) return "";
  const tokens = usage.totalTokens || usage.inputTokens + usage.outputTokens;
  const seconds = (s) => `${Math.round(s || 0)} s`;
  return `${tokens.toLocaleString()} tokens · audio ${seconds(usage.audioSecondsIn)} in, ${seconds(usage.audioSecondsOut)} out`;
}
