// AudioWorklet: plays model audio. The main thread posts ArrayBuffers of PCM16 little-endian mono
// at the context's rate; they go into a ring buffer that acts as the jitter buffer, and process()
// drains it 128 frames at a time, outputting silence when it runs dry.
//
// Jitter: after running dry, playback waits until `prebufferSeconds` (80 ms) are buffered, so audio
// that arrives at speaking pace with some jitter does not stutter; if less than that has waited
// `maxWaitSeconds` (120 ms) — the tail of an answer — it plays anyway.
//
// Messages in: an ArrayBuffer (samples to append) or {command: "flush"} (drop everything buffered,
// used on barge-in so the interrupted answer stops at once).
// Messages out: {played, buffered, flushes} — samples played so far, samples waiting, flushes done —
// about every 40 ms while audio plays, and at once after a flush or when the buffer runs dry.

const REPORT_EVERY = 8; // render quanta between reports while playing (8 × 128 frames ≈ 43 ms at 24 kHz)

class PcmPlayerProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    const seconds = opts.bufferSeconds || 60;
    this.size = Math.max(1, Math.round(sampleRate * seconds));
    this.ring = new Float32Array(this.size);
    this.readPos = 0;
    this.writePos = 0;
    this.count = 0; // samples buffered
    this.prebuffer = Math.round(sampleRate * (opts.prebufferSeconds ?? 0.08));
    this.maxWait = Math.round(sampleRate * (opts.maxWaitSeconds ?? 0.12));
    this.playing = false; // false while (re)filling up to `prebuffer`
    this.waited = 0; // frames waited while filling
    this.played = 0; // samples output from the buffer since the node started
    this.flushes = 0;
    this.quanta = 0;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  report() {
    this.quanta = 0;
    this.port.postMessage({ played: this.played, buffered: this.count, flushes: this.flushes });
  }

  onMessage(data) {
    if (data instanceof ArrayBuffer) {
      this.enqueue(data);
    } else if (data && data.command === "flush") {
      this.readPos = 0;
      this.writePos = 0;
      this.count = 0;
      this.playing = false;
      this.waited = 0;
      this.flushes += 1;
      this.report();
    }
  }

  enqueue(buffer) {
    // A trailing odd byte is not a whole sample: ignore it rather than fail.
    const samples = buffer.byteLength >> 1;
    const view = new DataView(buffer);
    for (let i = 0; i < samples; i++) {
      this.ring[this.writePos] = view.getInt16(i * 2, true) / 32768;
      this.writePos = (this.writePos + 1) % this.size;
      if (this.count < this.size) {
        this.count += 1;
      } else {
        // Full: overwrite the oldest sample (a minute behind is already useless).
        this.readPos = (this.readPos + 1) % this.size;
      }
    }
  }

  process(_inputs, outputs) {
    const output = outputs[0];
    const first = output && output[0];
    if (!first) return true;
    if (!this.playing && this.count > 0) {
      this.waited += first.length;
      this.playing = this.count >= this.prebuffer || this.waited >= this.maxWait;
    }
    if (!this.playing) {
      first.fill(0);
      for (let c = 1; c < output.length; c++) output[c].fill(0);
      return true;
    }
    const had = this.count;
    for (let i = 0; i < first.length; i++) {
      if (this.count > 0) {
        first[i] = this.ring[this.readPos];
        this.readPos = (this.readPos + 1) % this.size;
        this.count -= 1;
      } else {
        first[i] = 0;
      }
    }
    for (let c = 1; c < output.length; c++) output[c].set(first);
    if (this.count === 0) {
      this.playing = false;
      this.waited = 0;
    }
    if (had > 0) {
      this.played += had - this.count;
      this.quanta += 1;
      if (this.count === 0 || this.quanta >= REPORT_EVERY) this.report();
    }
    return true;
  }
}

registerProcessor("pcm-player-processor", PcmPlayerProcessor);
