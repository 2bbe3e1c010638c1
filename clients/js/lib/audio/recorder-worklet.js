// AudioWorklet: microphone float samples -> PCM16 little-endian mono at 16 kHz, posted to the main
// thread in fixed chunks (320 samples = 20 ms = 640 bytes) together with the chunk's RMS level.
//
// The context normally runs at 16 kHz already. Some browsers (Firefox) refuse to connect a
// microphone to a context at another rate, so app code may fall back to the native rate; then this
// processor resamples (box-filter average when downsampling, sample-and-hold when upsampling),
// which is plenty for speech.

class PcmRecorderProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.targetRate = opts.targetRate || 16000;
    this.chunkSamples = opts.chunkSamples || 320;
    // `sampleRate` is the worklet global: the rate of the AudioContext we run in.
    this.step = this.targetRate / sampleRate; // output samples per input sample
    this.phase = 0;
    this.acc = 0;
    this.accCount = 0;
    this.newChunk();
  }

  newChunk() {
    this.view = new DataView(new ArrayBuffer(this.chunkSamples * 2));
    this.filled = 0;
    this.sumSquares = 0;
  }

  // One output sample at the target rate.
  emit(sample) {
    // Clamp before scaling so loud input saturates instead of wrapping around; NaN becomes 0.
    const s = sample > 1 ? 1 : sample < -1 ? -1 : sample || 0;
    this.sumSquares += s * s;
    this.view.setInt16(this.filled * 2, Math.round(s * 32767), true);
    this.filled += 1;
    if (this.filled === this.chunkSamples) {
      const pcm = this.view.buffer;
      const rms = Math.sqrt(this.sumSquares / this.filled);
      // Transfer the buffer: no copy, and this thread no longer touches it.
      this.port.postMessage({ pcm, rms }, [pcm]);
      this.newChunk();
    }
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true; // no input connected (yet)
    if (this.step === 1) {
      for (let i = 0; i < channel.length; i++) this.emit(channel[i]);
      return true;
    }
    for (let i = 0; i < channel.length; i++) {
      this.acc += channel[i];
      this.accCount += 1;
      this.phase += this.step;
      if (this.phase >= 1) {
        const value = this.acc / this.accCount;
        while (this.phase >= 1) {
          this.emit(value);
          this.phase -= 1;
        }
        this.acc = 0;
        this.accCount = 0;
      }
    }
    return true; // keep running until the node is disconnected
  }
}

registerProcessor("pcm-recorder-processor", PcmRecorderProcessor);
