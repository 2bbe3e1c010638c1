// The answer's waveform on a canvas, drawn while it plays (from the player's analyser) and flat
// when it does not; animation frames run only while there is audio.

export class Waveform {
  /** @param {HTMLCanvasElement} canvas */
  constructor(canvas) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.bytes = new Uint8Array(512);
    this.frame = 0;
    this.player = null;
    this.drawn = 0; // frames drawn with sound in them (read by the browser tests)
    this.flat();
  }

  start(player) {
    this.player = player;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.draw());
  }

  draw() {
    this.frame = 0;
    const player = this.player;
    if (!player || !player.playing || !player.waveform(this.bytes)) {
      this.flat();
      return;
    }
    const { canvas, ctx, bytes } = this;
    const { width, height } = canvas;
    ctx.clearRect(0, 0, width, height);
    ctx.strokeStyle = getComputedStyle(canvas).color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    let loud = false;
    for (let i = 0; i < bytes.length; i++) {
      const x = (i / (bytes.length - 1)) * width;
      const y = (bytes[i] / 255) * height;
      if (Math.abs(bytes[i] - 128) > 2) loud = true;
      if (i === 0) ctx.moveTo(x, y);
      else ctx.lineTo(x, y);
    }
    ctx.stroke();
    if (loud) {
      this.drawn += 1;
      this.canvas.dataset.drawn = String(this.drawn);
    }
    this.frame = requestAnimationFrame(() => this.draw());
  }

  flat() {
    const { canvas, ctx } = this;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.strokeStyle = getComputedStyle(canvas).color;
    ctx.globalAlpha = 0.4;
    ctx.beginPath();
    ctx.moveTo(0, canvas.height / 2);
    ctx.lineTo(canvas.width, canvas.height / 2);
    ctx.stroke();
    ctx.globalAlpha = 1;
  }
}
