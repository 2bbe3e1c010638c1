// Plays 16-bit PCM from a ring buffer (the jitter buffer); "flush" drops everything queued.
class PcmPlayerProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.buffer = new Float32Array(sampleRate * 60);
    this.read = 0;
    this.write = 0;
    this.port.onmessage = (event) => {
      if (event.data && event.data.command === "flush") {
        this.read = this.write;
        return;
      }
      // Ignore a trailing odd byte rather than throwing on it.
      const samples = new Int16Array(event.data, 0, Math.floor(event.data.byteLength / 2));
      for (let i = 0; i < samples.length; i++) {
        this.buffer[this.write] = samples[i] / 32768;
        this.write = (this.write + 1) % this.buffer.length;
        if (this.write === this.read) this.read = (this.read + 1) % this.buffer.length;
      }
    };
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    for (let i = 0; i < out[0].length; i++) {
      let v = 0;
      if (this.read !== this.write) {
        v = this.buffer[this.read];
        this.read = (this.read + 1) % this.buffer.length;
      }
      for (const channel of out) channel[i] = v;
    }
    return true;
  }
}
registerProcessor("pcm-player-processor", PcmPlayerProcessor);
