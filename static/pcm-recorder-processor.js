// Captures microphone audio as 16-bit PCM in 20 ms chunks (320 samples at 16 kHz).
class PcmRecorderProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.chunk = new Int16Array(320);
    this.filled = 0;
  }

  process(inputs) {
    const input = inputs[0] && inputs[0][0];
    if (!input) return true;
    for (let i = 0; i < input.length; i++) {
      // Clamp before scaling so loud input saturates instead of wrapping around.
      const s = Math.max(-1, Math.min(1, input[i]));
      this.chunk[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.filled === this.chunk.length) {
        const out = this.chunk;
        this.port.postMessage(out.buffer, [out.buffer]);
        this.chunk = new Int16Array(320);
        this.filled = 0;
      }
    }
    return true;
  }
}
registerProcessor("pcm-recorder-processor", PcmRecorderProcessor);
