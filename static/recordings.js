// The session's recordings panel: ADK's live recordings (`adk_live_audio_storage_{input|output}_audio_{ms}.pcm`)
// and any other artifacts, newest first, each with a play button (WAV from the REST API) and a
// download link. One shared <audio> element plays one recording at a time.

import { listArtifacts, artifactUrl } from "./api.js";
import { icon } from "./icons.js";
import { whenTime } from "./time.js";

const RECORDING_RE = /^adk_live_audio_storage_(input|output)_audio_(\d+)\.pcm$/;

function isPcm(mimeType) {
  return /^audio\/(pcm|l16)\b/i.test(mimeType || "");
}


/** One row per artifact version, newest first. */
export function recordingRows(userId, sessionId, artifacts) {
  const rows = [];
  for (const a of artifacts) {
    const match = RECORDING_RE.exec(a.name || "");
    const versions = Array.isArray(a.versions) && a.versions.length ? a.versions : [0];
    for (const version of versions) {
      const playable = isPcm(a.mimeType) || /^audio\//i.test(a.mimeType || "");
      const format = isPcm(a.mimeType) ? "wav" : "raw";
      rows.push({
        name: a.name,
        version,
        mimeType: a.mimeType || "",
        side: match ? match[1] : null,
        at: match ? Number(match[2]) : null,
        playable,
        url: artifactUrl(userId, sessionId, a.name, version, format),
      });
    }
  }
  rows.sort((x, y) => (y.at ?? 0) - (x.at ?? 0) || y.version - x.version || (x.name < y.name ? -1 : 1));
  return rows;
}

export class Recordings {
  /**
   * @param {object} o
   * @param {HTMLElement} o.list    the <ul> of rows
   * @param {HTMLElement} o.counter where the count goes
   * @param {HTMLElement} o.status  a polite live region for "loading…" / errors
   * @param {(rows: object[]) => void} [o.onRows]
   */
  constructor({ list, counter, status, onRows }) {
    this.list = list;
    this.counter = counter;
    this.status = status;
    this.onRows = onRows || (() => {});
    this.audio = new Audio();
    this.audio.preload = "none";
    this.playing = null; // the row's button while its recording plays
    this.generation = 0;
    this.timer = 0;
    this.audio.addEventListener("ended", () => this.setPlaying(null));
    this.audio.addEventListener("pause", () => this.setPlaying(null));
    this.audio.addEventListener("error", () => {
      if (this.playing) this.status.textContent = "Could not play that recording.";
      this.setPlaying(null);
    });
    list.addEventListener("click", (e) => {
      const button = e.target.closest("button.rec-play");
      if (button) this.toggle(button);
    });
  }

  /** Loads the list for this session (replacing what is shown). */
  async load(userId, sessionId) {
    clearTimeout(this.timer);
    const generation = ++this.generation;
    this.session = { userId, sessionId };
    let artifacts;
    try {
      artifacts = await listArtifacts(userId, sessionId);
    } catch (error) {
      if (generation === this.generation) this.status.textContent = `Recordings unavailable: ${error.message}`;
      return;
    }
    if (generation !== this.generation) return; // another session was picked meanwhile
    this.render(recordingRows(userId, sessionId, artifacts));
  }

  /** A recording was announced in the stream: reload soon (several arrive together). */
  refreshSoon() {
    if (!this.session) return;
    clearTimeout(this.timer);
    const { userId, sessionId } = this.session;
    this.timer = setTimeout(() => this.load(userId, sessionId), 300);
  }

  clear() {
    this.generation += 1;
    this.session = null;
    this.stop();
    this.render([]);
  }

  /** A session the gateway has not stored yet: nothing to list (asking would be a 404), but its
   * recordings are loaded as they are announced. */
  startEmpty(userId, sessionId) {
    this.clear();
    this.session = { userId, sessionId };
  }

  stop() {
    this.audio.pause();
    this.audio.removeAttribute("src");
    this.setPlaying(null);
  }

  render(rows) {
    const playingUrl = this.playing ? this.playing.dataset.url : null;
    this.list.replaceChildren(...rows.map((row) => this.row(row)));
    this.counter.textContent = `(${rows.length})`;
    this.status.textContent = rows.length ? "" : "No recordings in this session yet.";
    // Keep the button of a recording that is playing in step with the new list.
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

    const play = document.createElement("button");
    play.type = "button";
    play.className = "rec-play small-btn";
    play.dataset.url = row.url;
    play.disabled = !row.playable;
    play.setAttribute("aria-pressed", "false");
    const spoken = row.side === "input" ? "your speech" : row.side === "output" ? "the agent's answer" : row.name;
    play.setAttribute("aria-label", `Play ${spoken}${row.at ? " from " + when : ""}${version}`);
    play.append(icon("play"));

    const label = document.createElement("span");
    label.className = "rec-label";
    const strong = document.createElement("strong");
    strong.textContent = who + version;
    const time = document.createElement("span");
    time.className = "muted";
    time.textContent = when;
    label.append(strong, " ", time);
    label.title = `${row.name} #${row.version} · ${row.mimeType}`;

    const link = document.createElement("a");
    link.className = "rec-download";
    link.href = row.url;
    link.download = row.name.replace(/\.pcm$/, "") + (row.url.includes("format=wav") ? ".wav" : "");
    link.textContent = row.url.includes("format=wav") ? "WAV" : "file";
    link.setAttribute("aria-label", `Download ${spoken}${row.at ? " from " + when : ""}`);

    li.append(play, label, link);
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

  setPlaying(button) {
    if (this.playing && this.playing !== button) {
      this.playing.setAttribute("aria-pressed", "false");
      this.playing.replaceChildren(icon("play"));
    }
    this.playing = button;
    if (button) {
      button.setAttribute("aria-pressed", "true");
      button.replaceChildren(icon("pause"));
    }
  }
}
