// The session's recordings: ADK's live recordings (`adk_live_audio_storage_{input|output}_audio_{ms}.pcm`)
// and any other artifacts, newest first, each with its duration, a play button with progress (WAV
// from the REST API), a link to the turn it belongs to, and a download link. One shared <audio>
// plays one recording at a time.

import { recordingOf } from "/lib/index.js";
import { icon } from "./icons.js";
import { whenTime } from "./time.js";

const RATES = { input: 16000, output: 24000 }; // PCM16 mono, as the gateway records them

function isPcm(mimeType) {
  return /^audio\/(pcm|l16)\b/i.test(mimeType || "");
}

function seconds(s) {
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)}:${String(Math.round(s % 60)).padStart(2, "0")}`;
}

/** One row per artifact version, newest first; `url(name, version, format)` gives its address. */
export async function recordingRows(artifacts, url) {
  const rows = [];
  for (const a of artifacts) {
    const rec = recordingOf(a.name || "");
    const versions = Array.isArray(a.versions) && a.versions.length ? a.versions : [0];
    const latest = Math.max(...versions);
    for (const version of versions) {
      const pcm = isPcm(a.mimeType);
      const rate = pcm && rec ? RATES[rec.side] : null;
      // The listing has the latest version's size only.
      const size = version === latest && Number.isFinite(a.size) ? a.size : null;
      rows.push({
        name: a.name,
        version,
        mimeType: a.mimeType || "",
        side: rec ? rec.side : null,
        at: rec ? rec.at : null,
        seconds: rate && size !== null ? size / 2 / rate : null,
        playable: pcm || /^audio\//i.test(a.mimeType || ""),
        url: await url(a.name, version, pcm ? "wav" : "raw"),
      });
    }
  }
  rows.sort((x, y) => (y.at ?? 0) - (x.at ?? 0) || y.version - x.version || (x.name < y.name ? -1 : 1));
  return rows;
}

export class Recordings {
  /**
   * @param {object} o
   * @param {HTMLElement} o.list
   * @param {HTMLElement} o.counter
   * @param {HTMLElement} o.status
   * @param {(name: string) => HTMLElement | null} o.turnOf  the conversation element of a recording's turn
   * @param {(el: HTMLElement) => void} o.showTurn
   * @param {(rows: object[]) => void} [o.onRows]
   */
  constructor({ list, counter, status, turnOf, showTurn, onRows }) {
    Object.assign(this, { list, counter, status, turnOf, showTurn });
    this.onRows = onRows || (() => {});
    this.audio = new Audio();
    this.audio.preload = "none";
    this.playing = null; // the row's button while its recording plays
    this.generation = 0;
    this.timer = 0;
    this.rows = [];
    this.audio.addEventListener("ended", () => this.setPlaying(null));
    this.audio.addEventListener("pause", () => this.setPlaying(null));
    this.audio.addEventListener("timeupdate", () => this.progress());
    this.audio.addEventListener("error", () => {
      if (this.playing) this.status.textContent = "Could not play that recording.";
      this.setPlaying(null);
    });
    list.addEventListener("click", (e) => {
      const play = e.target.closest("button.rec-play");
      if (play) this.toggle(play);
      const turn = e.target.closest("button.rec-turn");
      if (turn) {
        const el = this.turnOf(turn.dataset.name);
        if (el) this.showTurn(el);
      }
    });
  }

  /** Loads the list for this session (replacing what is shown). */
  async load(api, userId, sessionId) {
    clearTimeout(this.timer);
    const generation = ++this.generation;
    this.session = { api, userId, sessionId };
    try {
      const artifacts = await api.artifacts(userId, sessionId);
      const rows = await recordingRows(artifacts, (name, version, format) => api.artifactUrl(userId, sessionId, name, version, format));
      if (generation === this.generation) this.render(rows);
    } catch (error) {
      if (generation === this.generation) this.status.textContent = `Recordings unavailable: ${error.message}`;
    }
  }

  /** A recording was announced: reload soon (several arrive together). */
  refreshSoon() {
    if (!this.session) return;
    clearTimeout(this.timer);
    const { api, userId, sessionId } = this.session;
    this.timer = setTimeout(() => this.load(api, userId, sessionId), 300);
  }

  clear() {
    this.generation += 1;
    this.session = null;
    this.stop();
    this.render([]);
  }

  /** A session the gateway has not stored yet: nothing to ask for, but announcements load it. */
  startEmpty(api, userId, sessionId) {
    this.clear();
    this.session = { api, userId, sessionId };
  }

  stop() {
    this.audio.pause();
    this.audio.removeAttribute("src");
    this.setPlaying(null);
  }

  /** Re-renders (the conversation learned which turn a recording belongs to). */
  relink() {
    this.render(this.rows);
  }

  render(rows) {
    this.rows = rows;
    const playingUrl = this.playing ? this.playing.dataset.url : null;
    this.list.replaceChildren(...rows.map((row) => this.row(row)));
    this.counter.textContent = `(${rows.length})`;
    this.status.textContent = rows.length ? "" : "No recordings in this session yet.";
    this.playing = null;
    if (playingUrl && !this.audio.paused) {
      const button = [...this.list.querySelectorAll("button.rec-play")].find((b) => b.dataset.url === playingUrl);
      if (button) this.setPlaying(button);
    }
    this.onRows(rows);
  }

  row(row) {
    const li = document.createElement("li");
    li.className = `rec ${row.side || "other"}`;
    const who = row.side === "input" ? "You" : row.side === "output" ? "Agent" : row.name;
    const when = row.at ? whenTime(new Date(row.at)) : row.mimeType;
    const version = row.version > 0 ? ` (v${row.version})` : "";
    const spoken = row.side === "input" ? "your speech" : row.side === "output" ? "the agent's answer" : row.name;

    const play = document.createElement("button");
    play.type = "button";
    play.className = "rec-play small-btn";
    play.dataset.url = row.url;
    play.disabled = !row.playable;
    play.setAttribute("aria-pressed", "false");
    play.setAttribute("aria-label", `Play ${spoken}${row.at ? " from " + when : ""}${version}`);
    play.append(icon("play"));

    const label = document.createElement("span");
    label.className = "rec-label";
    const strong = document.createElement("strong");
    strong.textContent = who + version;
    const time = document.createElement("span");
    time.className = "muted";
    time.textContent = when;
    const length = document.createElement("span");
    length.className = "rec-duration muted";
    length.textContent = row.seconds !== null ? seconds(row.seconds) : "";
    const bar = document.createElement("progress");
    bar.className = "rec-progress";
    bar.max = 1;
    bar.value = 0;
    bar.hidden = true;
    bar.setAttribute("aria-label", `Playback of ${spoken}`);
    label.append(strong, " ", time, " ", length, bar);
    label.title = `${row.name} #${row.version} · ${row.mimeType}`;
    li.append(play, label);

    if (this.turnOf(row.name)) {
      const turn = document.createElement("button");
      turn.type = "button";
      turn.className = "rec-turn small-btn";
      turn.dataset.name = row.name;
      turn.setAttribute("aria-label", `Show the turn of ${spoken}${row.at ? " from " + when : ""}`);
      turn.title = "Show its turn in the conversation";
      turn.append(icon("link"));
      li.append(turn);
    }

    const link = document.createElement("a");
    link.className = "rec-download";
    link.href = row.url;
    link.download = row.name.replace(/\.pcm$/, "") + (row.url.includes("format=wav") ? ".wav" : "");
    link.textContent = row.url.includes("format=wav") ? "WAV" : "file";
    link.setAttribute("aria-label", `Download ${spoken}${row.at ? " from " + when : ""}`);
    li.append(link);
    return li;
  }

  toggle(button) {
    if (this.playing === button) {
      this.audio.pause();
      return;
    }
    this.audio.src = button.dataset.url;
    this.audio.play().then(
      () => this.setPlaying(button),
      (error) => {
        if (error.name !== "AbortError") this.status.textContent = `Could not play: ${error.message}`;
      },
    );
  }

  progress() {
    const bar = this.playing && this.playing.parentElement.querySelector(".rec-progress");
    if (bar && this.audio.duration > 0) bar.value = this.audio.currentTime / this.audio.duration;
  }

  setPlaying(button) {
    if (this.playing && this.playing !== button) {
      this.playing.setAttribute("aria-pressed", "false");
      this.playing.replaceChildren(icon("play"));
      const bar = this.playing.parentElement && this.playing.parentElement.querySelector(".rec-progress");
      if (bar) bar.hidden = true;
    }
    this.playing = button;
    if (button) {
      button.setAttribute("aria-pressed", "true");
      button.replaceChildren(icon("pause"));
      const bar = button.parentElement.querySelector(".rec-progress");
      if (bar) bar.hidden = false;
    }
  }
}
