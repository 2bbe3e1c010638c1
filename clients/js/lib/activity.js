// The agent's state as a person sees it: listening, thinking, speaking or idle, from a session's
// events and (for voice) whether its answer is still playing and whether the microphone is on.

export class AgentActivity {
  /**
   * @param {import("./session.js").LiveSession} session
   * @param {object} [o]
   * @param {() => boolean} [o.isPlaying]  the answer's audio is still being heard
   * @param {() => boolean} [o.isListening]  the microphone is on
   * @param {(state: string) => void} [o.onChange]
   */
  constructor(session, { isPlaying = () => false, isListening = () => false, onChange = () => {} } = {}) {
    this.isPlaying = isPlaying;
    this.isListening = isListening;
    this.onChange = onChange;
    this.state = "idle";
    this.waiting = false; // the user finished a turn; no answer yet
    this.answering = false; // an answer is arriving
    this.tool = false; // a tool runs
    const ask = () => this.set({ waiting: true });
    const answer = () => this.set({ waiting: false, answering: true, tool: false });
    const end = () => this.set({ waiting: false, answering: false, tool: false });
    this.off = [
      session.on("sent", ({ message }) => ["text", "activity_end", "audio_stream_end"].includes(message.type) && ask()),
      session.on("inputTranscription", (t) => t.finished && !this.answering && ask()),
      session.on("text", (t) => !t.fromUser && answer()),
      session.on("outputTranscription", answer),
      session.on("audio", answer),
      // The agent waits only for the calls that do not run in the background.
      session.on("toolCall", (t) => !t.background && this.set({ tool: true })),
      session.on("toolResult", (t) => !t.scheduling && this.set({ tool: false })),
      session.on("interrupted", end),
      session.on("turnComplete", end),
      session.on("turnAborted", end),
    ];
  }

  set(change) {
    Object.assign(this, change);
    this.update();
  }

  /** Recomputes the state (call when playback or the microphone changes). */
  update() {
    const state = this.isPlaying() || (this.answering && !this.tool)
      ? "speaking"
      : this.waiting || this.tool
        ? "thinking"
        : this.isListening()
          ? "listening"
          : "idle";
    if (state === this.state) return;
    this.state = state;
    this.onChange(state);
  }

  detach() {
    this.off.forEach((f) => f());
  }
}
