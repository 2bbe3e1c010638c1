// Microphone capture: getUserMedia -> AudioWorklet -> PCM16 little-endian mono at 16 kHz in 20 ms
// chunks (640 bytes), with the chunk's level, a chosen device, echo cancellation settings and mute.

export const MIC_RATE = 16000;
export const CHUNK_SAMPLES = 320; // 20 ms at 16 kHz

const WORKLET_URL = new URL("./recorder-worklet.js", import.meta.url);

/** RMS (0..1) to a 0..1 meter position on a -60..0 dBFS scale, which matches how loud it sounds. */
export function levelFromRms(rms) {
  const db = 20 * Math.log10(rms + 1e-9);
  return Math.min(1, Math.max(0, (db + 60) / 60));
}

/**
 * The devices of a kind (`audioinput` or `audiooutput`): [{deviceId, label}]. Labels are empty
 * until the page has had microphone permission once.
 */
export async function listDevices(kind = "audioinput") {
  if (!globalThis.navigator || !navigator.mediaDevices || !navigator.mediaDevices.enumerateDevices) return [];
  const all = await navigator.mediaDevices.enumerateDevices();
  return all.filter((d) => d.kind === kind).map((d, i) => ({ deviceId: d.deviceId, label: d.label || `${kind === "audioinput" ? "Microphone" : "Speaker"} ${i + 1}` }));
}

export class Microphone {
  /**
   * @param {object} [o]
   * @param {(pcm: ArrayBuffer, level: number) => void} [o.onChunk]  every 20 ms while on and not muted
   * @param {(level: number) => void} [o.onLevel]  every 20 ms while on (0 while muted)
   * @param {() => void} [o.onEnded]  the device went away (unplugged, permission revoked)
   * @param {string} [o.deviceId]
   * @param {boolean} [o.echoCancellation]
   * @param {boolean} [o.noiseSuppression]
   * @param {boolean} [o.autoGainControl]
   */
  constructor({ onChunk, onLevel, onEnded, deviceId = "", echoCancellation = true, noiseSuppression = true, autoGainControl = true } = {}) {
    this.onChunk = onChunk || (() => {});
    this.onLevel = onLevel || (() => {});
    this.onEnded = onEnded || (() => {});
    this.options = { deviceId, echoCancellation, noiseSuppression, autoGainControl };
    this.context = null;
    this.stream = null;
    this.node = null;
    this.muted = false;
    this.level = 0;
    this.chunks = 0;
  }

  get active() {
    return this.context !== null;
  }

  /** The constraints getUserMedia is asked with. */
  constraints() {
    const { deviceId, echoCancellation, noiseSuppression, autoGainControl } = this.options;
    const audio = { channelCount: 1, echoCancellation, noiseSuppression, autoGainControl };
    if (deviceId) audio.deviceId = { exact: deviceId };
    return { audio };
  }

  /** Asks for the microphone (from a user gesture, the first time) and starts the chunks. */
  async start() {
    if (this.context) return;
    if (!globalThis.navigator || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("the microphone needs a secure page (https:// or localhost)");
    }
    const stream = await navigator.mediaDevices.getUserMedia(this.constraints());
    let context = null;
    try {
      let source;
      try {
        context = new AudioContext({ sampleRate: MIC_RATE });
        source = context.createMediaStreamSource(stream);
      } catch {
        // Firefox refuses a microphone in a context at another rate: the worklet resamples.
        if (context) context.close();
        context = new AudioContext();
        source = context.createMediaStreamSource(stream);
      }
      if (!context.audioWorklet) throw new Error("AudioWorklet needs a secure page (https:// or localhost)");
      await context.audioWorklet.addModule(WORKLET_URL);
      const node = new AudioWorkletNode(context, "pcm-recorder-processor", {
        channelCount: 1,
        channelCountMode: "explicit", // stereo microphones down-mixed to mono
        processorOptions: { targetRate: MIC_RATE, chunkSamples: CHUNK_SAMPLES },
      });
      node.port.onmessage = (e) => this.chunk(e.data.pcm, e.data.rms);
      // A muted path to the destination keeps the node pulled by the graph in every browser.
      const silent = context.createGain();
      silent.gain.value = 0;
      source.connect(node).connect(silent).connect(context.destination);
      if (context.state === "suspended") await context.resume();
      for (const track of stream.getAudioTracks()) track.addEventListener("ended", () => this.context && this.onEnded());
      this.context = context;
      this.stream = stream;
      this.node = node;
    } catch (error) {
      stream.getTracks().forEach((t) => t.stop());
      if (context) context.close();
      throw error;
    }
  }

  chunk(pcm, rms) {
    this.level = this.muted ? 0 : levelFromRms(rms);
    this.onLevel(this.level);
    if (this.muted) return;
    this.chunks += 1;
    this.onChunk(pcm, this.level);
  }

  /** Mutes (nothing is delivered, the device stays open) or unmutes. */
  setMuted(muted) {
    this.muted = Boolean(muted);
  }

  /** The label of the device in use, once started. */
  get deviceLabel() {
    const track = this.stream && this.stream.getAudioTracks()[0];
    return track ? track.label : "";
  }

  /** Another device, or other processing: applied now if on (a restart), else at the next start. */
  async configure(options) {
    Object.assign(this.options, options);
    if (!this.context) return;
    this.stop();
    await this.start();
  }

  stop() {
    if (this.node) {
      this.node.port.onmessage = null;
      this.node.disconnect();
    }
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.context) this.context.close().catch(() => {});
    this.node = null;
    this.stream = null;
    this.context = null;
    this.level = 0;
  }
}
