// Model audio playback: PCM16 chunks (24 kHz from the gateway) through a ring-buffer worklet that
// doubles as jitter buffer, flushed at once on barge-in, with an analyser for levels and a
// waveform, a chosen output device, and the autoplay unlock browsers require.
//
// Without AudioWorklet (plain http:// on a LAN address is not a secure context) chunks are
// scheduled as AudioBufferSourceNodes instead: less smooth, but audible.

export const PLAY_RATE = 24000;
const WORKLET_URL = new URL("./player-worklet.js", import.meta.url);

export class Player {
  /**
   * @param {object} [o]
   * @param {(state: "none"|"suspended"|"running"|"closed", hasAudio: boolean) => void} [o.onState]
   *   "suspended" with audio waiting: the browser blocks playback until a gesture calls unlock()
   * @param {(stats: {played: number, buffered: number, flushes: number}) => void} [o.onStats]
   * @param {string} [o.sinkId]  the output device ("" for the default)
   */
  constructor({ onState, onStats, sinkId = "" } = {}) {
    this.onState = onState || (() => {});
    this.onStats = onStats || (() => {});
    this.stats = { played: 0, buffered: 0, flushes: 0 };
    this.base = { played: 0, flushes: 0 }; // what closed contexts played and flushed
    this.hasAudio = false;
    this.rate = PLAY_RATE;
    this.sinkId = sinkId;
    this.context = null;
    this.node = null;
    this.analyser = null;
    this.queue = []; // chunks that arrive while the worklet loads
    this.sources = new Set(); // fallback path: scheduled buffer sources
    this.nextTime = 0;
    this.fallback = false;
  }

  get state() {
    return this.context ? this.context.state : "none";
  }

  /** Samples waiting to be heard: > 0 while the answer plays. */
  get playing() {
    return this.stats.buffered > 0;
  }

  /** Call from a user gesture (a click, a key): lets the browser start audio. */
  unlock() {
    try {
      this.ensure(this.rate);
      if (this.context.state === "suspended") this.context.resume().catch(() => {});
    } catch (error) {
      console.warn("audio playback unavailable", error);
    }
  }

  /** Calls unlock() on the page's next click or key press. */
  unlockOnGesture(target = globalThis.document) {
    const once = () => {
      this.unlock();
      for (const type of ["pointerdown", "keydown"]) target.removeEventListener(type, once, true);
    };
    for (const type of ["pointerdown", "keydown"]) target.addEventListener(type, once, true);
  }

  /** Plays on another output device (Chromium's AudioContext.setSinkId); false where unsupported. */
  async setSinkId(sinkId) {
    this.sinkId = sinkId || "";
    if (this.context && typeof this.context.setSinkId === "function") {
      await this.context.setSinkId(this.sinkId);
      return true;
    }
    return Boolean(globalThis.AudioContext && "setSinkId" in AudioContext.prototype);
  }

  ensure(rate) {
    // Compare with the requested rate: an unusual rate may have given a context at another one.
    if (this.context && this.rate === rate) return;
    this.close();
    let context;
    try {
      context = new AudioContext({ sampleRate: rate });
    } catch {
      context = new AudioContext(); // an unusual rate: the fallback path resamples per buffer
    }
    this.context = context;
    this.rate = rate;
    if (this.sinkId && typeof context.setSinkId === "function") context.setSinkId(this.sinkId).catch(() => {});
    const analyser = (this.analyser = context.createAnalyser());
    analyser.fftSize = 1024;
    analyser.connect(context.destination);
    context.onstatechange = () => this.context === context && this.onState(context.state, this.hasAudio);
    if (context.audioWorklet && context.sampleRate === rate) {
      context.audioWorklet
        .addModule(WORKLET_URL)
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
          node.connect(analyser);
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

  /** Queues PCM16 little-endian mono at `rate` Hz. Takes ownership of `buffer`. */
  play(buffer, rate = this.rate) {
    if (!buffer || buffer.byteLength < 2) return;
    this.ensure(rate);
    if (!this.hasAudio) {
      this.hasAudio = true;
      this.onState(this.context.state, true);
    }
    // Works if the page already had a user gesture; otherwise onState says "suspended".
    if (this.context.state === "suspended") this.context.resume().catch(() => {});
    if (this.node) this.node.port.postMessage(buffer, [buffer]);
    else if (this.fallback) this.schedule(buffer);
    else this.queue.push(buffer);
  }

  report(stats) {
    this.stats = stats;
    this.onStats(stats);
  }

  /** Drops everything buffered, at once (barge-in). The worklet acknowledges with its stats. */
  flush() {
    this.dropQueued();
    if (this.node) this.node.port.postMessage({ command: "flush" });
    else this.report({ played: this.stats.played, buffered: 0, flushes: this.stats.flushes + 1 });
  }

  /**
   * The output's level now, 0..1 (RMS of the last ~20 ms), for a meter.
   */
  level() {
    if (!this.analyser) return 0;
    const data = new Float32Array(this.analyser.fftSize);
    this.analyser.getFloatTimeDomainData(data);
    let sum = 0;
    for (const v of data) sum += v * v;
    return Math.sqrt(sum / data.length);
  }

  /** Fills `into` with the output's waveform (bytes centred on 128); false before any audio. */
  waveform(into) {
    if (!this.analyser) return false;
    this.analyser.getByteTimeDomainData(into);
    return true;
  }

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
    const samples = buffer.byteLength >> 1;
    if (!samples) return;
    const view = new DataView(buffer);
    const audio = context.createBuffer(1, samples, this.rate);
    const channel = audio.getChannelData(0);
    for (let i = 0; i < samples; i++) channel[i] = view.getInt16(i * 2, true) / 32768;
    const source = context.createBufferSource();
    source.buffer = audio;
    source.connect(this.analyser);
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

  /** Releases the audio context (a later play() opens a new one). */
  close() {
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.disconnect();
    }
    this.node = null;
    this.analyser = null;
    this.dropQueued();
    this.base = { played: this.stats.played, flushes: this.stats.flushes };
    this.report({ ...this.base, buffered: 0 });
    if (this.context) this.context.close().catch(() => {});
    this.context = null;
    this.fallback = false;
  }
}
