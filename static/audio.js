// Microphone capture (PCM16 16 kHz up, 20 ms chunks) and model audio playback (PCM16 down, through
// a ring-buffer worklet that doubles as jitter buffer), plus the small decoding helpers they need.

export const MIC_RATE = 16000;
export const CHUNK_SAMPLES = 320; // 20 ms at 16 kHz = 640 bytes per binary frame
export const DEFAULT_PLAY_RATE = 24000;

const RECORDER_URL = new URL("/lib/audio/recorder-worklet.js", import.meta.url);
const PLAYER_URL = new URL("/lib/audio/player-worklet.js", import.meta.url);

/** The `rate=` parameter of a mime type such as `audio/pcm;rate=24000`, or `fallback`. */
export function parseRate(mimeType, fallback = DEFAULT_PLAY_RATE) {
  const match = /(?:^|;)\s*rate=(\d+)/i.exec(mimeType || "");
  const rate = match ? Number(match[1]) : NaN;
  return rate >= 3000 && rate <= 768000 ? rate : fallback;
}

/** Base64 to bytes; accepts the standard and URL-safe alphabets, with or without padding. */
export function base64ToBytes(text) {
  let s = String(text).replace(/[\s=]/g, "").replace(/-/g, "+").replace(/_/g, "/");
  if (s.length % 4 === 2) s += "==";
  else if (s.length % 4 === 3) s += "=";
  const raw = atob(s);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

/** RMS (0..1) to a 0..1 meter position on a -60..0 dBFS scale, which matches how loud it sounds. */
export function levelFromRms(rms) {
  const db = 20 * Math.log10(rms + 1e-9);
  return Math.min(1, Math.max(0, (db + 60) / 60));
}

/**
 * Microphone -> AudioWorklet -> `onChunk(ArrayBuffer, rms)` every 20 ms.
 */
export class Recorder {
  constructor({ onChunk }) {
    this.onChunk = onChunk;
    this.context = null;
    this.stream = null;
    this.node = null;
    this.onEnded = null; // called if the device goes away on its own
  }

  get active() {
    return this.context !== null;
  }

  async start() {
    if (this.context) return;
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("the microphone needs a secure page (https:// or localhost)");
    }
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
    });
    let context = null;
    try {
      let source;
      try {
        context = new AudioContext({ sampleRate: MIC_RATE });
        source = context.createMediaStreamSource(stream);
      } catch {
        // Firefox refuses a microphone in a context at another rate: use the native rate, and
        // the worklet resamples to 16 kHz.
        if (context) context.close();
        context = new AudioContext();
        source = context.createMediaStreamSource(stream);
      }
      if (!context.audioWorklet) throw new Error("AudioWorklet needs a secure page (https:// or localhost)");
      await context.audioWorklet.addModule(RECORDER_URL);
      const node = new AudioWorkletNode(context, "pcm-recorder-processor", {
        channelCount: 1,
        channelCountMode: "explicit", // down-mix stereo microphones to mono
        processorOptions: { targetRate: MIC_RATE, chunkSamples: CHUNK_SAMPLES },
      });
      node.port.onmessage = (e) => this.onChunk(e.data.pcm, e.data.rms);
      // A muted path to the destination keeps the node pulled by the graph in every browser.
      const mute = context.createGain();
      mute.gain.value = 0;
      source.connect(node).connect(mute).connect(context.destination);
      if (context.state === "suspended") await context.resume();
      for (const track of stream.getAudioTracks()) {
        track.addEventListener("ended", () => this.onEnded && this.onEnded());
      }
      this.context = context;
      this.stream = stream;
      this.node = node;
    } catch (error) {
      stream.getTracks().forEach((t) => t.stop());
      if (context) context.close();
      throw error;
    }
  }

  stop() {
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.disconnect();
    }
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.context) this.context.close();
    this.node = null;
    this.stream = null;
    this.context = null;
  }
}

/**
 * Plays PCM16 chunks. The AudioContext must be started by a user gesture (autoplay rules), so
 * `unlock()` is called from click handlers; a context created later (at a newly seen rate) can
 * start because the page then has user activation. `onState(state, hasAudio)` reports "running" /
 * "suspended" (and whether audio has arrived) so the page can offer an "Enable audio" button when
 * the browser blocks playback. `onStats({played, buffered, flushes})` reports samples played so
 * far, samples waiting and flushes done (barge-in), counted over every context this player used.
 *
 * Without AudioWorklet (plain http:// on a LAN address is not a secure context) chunks are
 * scheduled as AudioBufferSourceNodes instead: less smooth, but audible.
 */
export class Player {
  constructor({ onState, onStats } = {}) {
    this.onState = onState || (() => {});
    this.onStats = onStats || (() => {});
    this.stats = { played: 0, buffered: 0, flushes: 0 };
    this.base = { played: 0, flushes: 0 }; // what closed contexts played and flushed
    this.hasAudio = false; // set by play(): a blocked context only matters once audio is waiting
    this.rate = DEFAULT_PLAY_RATE;
    this.context = null;
    this.node = null;
    this.queue = []; // chunks that arrive while the worklet module loads
    this.sources = new Set(); // fallback path: scheduled buffer sources
    this.nextTime = 0;
  }

  get state() {
    return this.context ? this.context.state : "none";
  }

  /** Call from a user gesture: creates (or resumes) the context at the last seen rate. */
  unlock() {
    try {
      this.ensure(this.rate);
      if (this.context.state === "suspended") this.context.resume().catch(() => {});
    } catch (error) {
      console.warn("audio playback unavailable", error);
    }
  }

  ensure(rate) {
    // Compare with the requested rate: an unusual rate may have given a context at another one.
    if (this.context && this.rate === rate) return;
    this.close();
    let context;
    try {
      context = new AudioContext({ sampleRate: rate });
    } catch {
      context = new AudioContext(); // unusual rate: the fallback path resamples per buffer
    }
    this.context = context;
    this.rate = rate;
    context.onstatechange = () => {
      if (this.context === context) this.onState(context.state, this.hasAudio);
    };
    if (context.audioWorklet && context.sampleRate === rate) {
      context.audioWorklet
        .addModule(PLAYER_URL)
        .then(() => {
          if (this.context !== context) return;
          const node = new AudioWorkletNode(context, "pcm-player-processor", {
            numberOfInputs: 0,
            outputChannelCount: [1],
            processorOptions: { bufferSeconds: 60 },
          });
          node.port.onmessage = (e) => {
            if (this.node !== node) return;
            const { played, buffered, flushes } = e.data;
            this.report({ played: this.base.played + played, buffered, flushes: this.base.flushes + flushes });
          };
          node.connect(context.destination);
          this.node = node;
          for (const chunk of this.queue.splice(0)) node.port.postMessage(chunk, [chunk]);
        })
        .catch((error) => {
          console.warn("player worklet failed; using buffer sources", error);
          if (this.context === context) this.useFallback();
        });
    } else {
      this.useFallback();
    }
    this.onState(context.state, this.hasAudio);
  }

  useFallback() {
    this.fallback = true;
    for (const chunk of this.queue.splice(0)) this.schedule(chunk);
  }

  /** Queues one chunk of PCM16 little-endian mono at `rate` Hz. Takes ownership of `buffer`. */
  play(buffer, rate = this.rate) {
    if (!buffer || buffer.byteLength < 2) return;
    this.ensure(rate);
    if (!this.hasAudio) {
      this.hasAudio = true;
      this.onState(this.context.state, true);
    }
    if (this.context.state === "suspended") {
      // Works if the page already had a user gesture; otherwise onState shows "Enable audio".
      this.context.resume().catch(() => {});
    }
    if (this.node) this.node.port.postMessage(buffer, [buffer]);
    else if (this.fallback) this.schedule(buffer);
    else this.queue.push(buffer);
  }

  report(stats) {
    this.stats = stats;
    this.onStats(stats);
  }

  /** Drops everything buffered (barge-in). The worklet acknowledges with its stats. */
  flush() {
    this.dropQueued();
    if (this.node) {
      this.node.port.postMessage({ command: "flush" });
    } else {
      this.report({ played: this.stats.played, buffered: 0, flushes: this.stats.flushes + 1 });
    }
  }

  /** Forgets chunks waiting for the worklet and stops scheduled fallback buffers. */
  dropQueued() {
    this.queue = [];
    for (const source of this.sources) {
      source.onended = null; // stopped, not played: not counted
      try {
        source.stop();
      } catch {
        /* already stopped */
      }
    }
    this.sources.clear();
    this.nextTime = 0;
  }

  schedule(buffer) {
    const context = this.context;
    const samples = buffer.byteLength >> 1; // ignore a trailing odd byte
    if (!samples) return;
    const view = new DataView(buffer);
    const audio = context.createBuffer(1, samples, this.rate);
    const channel = audio.getChannelData(0);
    for (let i = 0; i < samples; i++) channel[i] = view.getInt16(i * 2, true) / 32768;
    const source = context.createBufferSource();
    source.buffer = audio;
    source.connect(context.destination);
    const at = Math.max(this.nextTime, context.currentTime + 0.05);
    source.start(at);
    this.nextTime = at + audio.duration;
    this.sources.add(source);
    const { played, buffered, flushes } = this.stats;
    this.report({ played, buffered: buffered + samples, flushes });
    source.onended = () => {
      this.sources.delete(source);
      const s = this.stats;
      this.report({ played: s.played + samples, buffered: Math.max(0, s.buffered - samples), flushes: s.flushes });
    };
  }

  close() {
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.disconnect();
    }
    this.node = null;
    this.dropQueued();
    this.base = { played: this.stats.played, flushes: this.stats.flushes };
    this.report({ ...this.base, buffered: 0 });
    if (this.context) this.context.close().catch(() => {});
    this.context = null;
    this.fallback = false;
  }
}
