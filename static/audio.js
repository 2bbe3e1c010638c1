// Microphone capture (16 kHz PCM16, 20 ms chunks) and playback (PCM16 through a jitter buffer).

export class Player {
  constructor() {
    this.context = null;
    this.node = null;
    this.rate = 0;
  }

  // Creates the playback context on a user gesture (autoplay rules), at the stream's rate.
  async start(rate = 24000) {
    if (this.context && this.rate === rate) return;
    if (this.context) await this.context.close();
    this.rate = rate;
    this.context = new AudioContext({ sampleRate: rate });
    await this.context.audioWorklet.addModule("./pcm-player-processor.js");
    this.node = new AudioWorkletNode(this.context, "pcm-player-processor", { outputChannelCount: [1] });
    this.node.connect(this.context.destination);
  }

  async play(buffer, rate) {
    if (!this.context || rate !== this.rate) await this.start(rate);
    if (this.context.state === "suspended") this.context.resume();
    this.node.port.postMessage(buffer, [buffer]);
  }

  flush() {
    if (this.node) this.node.port.postMessage({ command: "flush" });
  }
}

export class Recorder {
  constructor(onChunk, onLevel) {
    this.onChunk = onChunk;
    this.onLevel = onLevel;
    this.context = null;
    this.stream = null;
  }

  get running() {
    return this.context !== null;
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
    });
    this.context = new AudioContext({ sampleRate: 16000 });
    await this.context.audioWorklet.addModule("./pcm-recorder-processor.js");
    const source = this.context.createMediaStreamSource(this.stream);
    const node = new AudioWorkletNode(this.context, "pcm-recorder-processor");
    node.port.onmessage = (event) => {
      const samples = new Int16Array(event.data);
      let sum = 0;
      for (let i = 0; i < samples.length; i++) sum += (samples[i] / 32768) ** 2;
      this.onLevel(Math.min(1, Math.sqrt(sum / samples.length) * 4));
      this.onChunk(event.data);
    };
    source.connect(node);
  }

  async stop() {
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.context) await this.context.close();
    this.stream = null;
    this.context = null;
    this.onLevel(0);
  }
}
