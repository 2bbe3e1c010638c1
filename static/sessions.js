// The session picker: a <select> of the user's sessions (most recent first, from the REST API),
// always including the current one even before the gateway has stored it.

import { listSessions } from "./api.js";
import { dayOf } from "./time.js";

function ago(seconds) {
  if (!Number.isFinite(seconds)) return "";
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 45) return "just now";
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
  return dayOf(new Date(seconds * 1000));
}

export class SessionPicker {
  /**
   * @param {object} o
   * @param {HTMLSelectElement} o.select
   * @param {(sessionId: string) => void} o.onPick  the user chose another session
   * @param {(message: string) => void} [o.onError]
   */
  constructor({ select, onPick, onError }) {
    this.select = select;
    this.onError = onError || (() => {});
    this.sessions = [];
    this.current = null;
    this.generation = 0;
    this.failed = false;
    this.stale = false; // a render waits for the select to lose focus
    select.addEventListener("change", () => {
      if (select.value && select.value !== this.current) onPick(select.value);
    });
    select.addEventListener("blur", () => {
      if (this.stale) this.render();
    });
  }

  /** Shows `sessionId` as the current one. */
  setCurrent(sessionId) {
    this.current = sessionId;
    this.render();
  }

  /** Reloads the user's sessions; errors are reported once until a load works again. */
  async refresh(userId) {
    const generation = ++this.generation;
    try {
      const sessions = await listSessions(userId);
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
  }

  render() {
    const select = this.select;
    // Replacing the options while the user is choosing would move the choice under them.
    if (document.activeElement === select) {
      this.stale = true;
      return;
    }
    this.stale = false;
    const options = this.sessions.map((s) => {
      const option = document.createElement("option");
      option.value = s.id;
      const when = ago(Number(s.lastUpdateTime));
      option.textContent = when ? `${s.id} · ${when}` : s.id;
      return option;
    });
    if (this.current && !this.sessions.some((s) => s.id === this.current)) {
      const option = document.createElement("option");
      option.value = this.current;
      option.textContent = `${this.current} · new`;
      options.unshift(option);
    }
    select.replaceChildren(...options);
    if (this.current) select.value = this.current;
  }
}
