// The optional audio part of the livegate client: microphone capture, playback, and the wiring of
// both to a LiveSession (voice-activity or push-to-talk).

import { Microphone } from "./microphone.js";
import { Player } from "./player.js";

export { Microphone, MIC_RATE, levelFromRms, listDevices } from "./microphone.js";
export { Player, PLAY_RATE } from "./player.js";

/**
 * Connects a session to a microphone and a player: model audio plays, `interrupted` (and an
 * answer cut by a reconnect) flushes it at once, and microphone chunks go up — always in "vad"
 * mode (the model detects speech), only while talk(true) in "pushToTalk" mode. With the session's
 * `vad: false` setting, talk() sends activity_start / activity_end; otherwise releasing sends
 * audio_stream_end, so the model answers without waiting for more speech.
 *
 * @param {import("../session.js").LiveSession} session
 * @param {{microphone?: Microphone, player?: Player, mode?: "vad" | "pushToTalk"}} [o]
 */
export function connectAudio(session, { microphone = new Microphone(), player = new Player(), mode = "vad" } = {}) {
  let talking = false;
  const manual = () => session.settings.vad === false;
  const off = [
    session.on("audio", (a) => player.play(a.pcm, a.sampleRate)),
    session.on("interrupted", () => player.flush()),
    session.on("turnAborted", () => player.flush()),
  ];
  const previous = microphone.onChunk;
  microphone.onChunk = (pcm, level) => {
    if (mode === "vad" || talking) session.sendAudio(pcm);
    previous(pcm, level);
  };
  const voice = {
    microphone,
    player,
    get mode() {
      return mode;
    },
    get talking() {
      return talking;
    },
    /** "vad" or "pushToTalk"; leaving push-to-talk mid-press ends the press. */
    setMode(next) {
      if (talking) voice.talk(false);
      mode = next === "pushToTalk" ? "pushToTalk" : "vad";
    },
    /** Push-to-talk: pressed (true) or released (false). */
    talk(on) {
      on = Boolean(on);
      if (on === talking) return;
      talking = on;
      if (on) {
        player.unlock();
        if (manual()) session.activityStart();
      } else if (manual()) {
        session.activityEnd();
      } else {
        session.audioStreamEnd();
      }
    },
    /** Starts the microphone (call from a gesture: it also unlocks playback). */
    async start() {
      player.unlock();
      await microphone.start();
    },
    /** Stops the microphone and tells the model the audio stream paused. */
    stop() {
      if (talking) voice.talk(false);
      const was = microphone.active;
      microphone.stop();
      if (was) session.audioStreamEnd();
    },
    /** Unwires everything (the microphone and player stay as they are). */
    detach() {
      off.forEach((f) => f());
      microphone.onChunk = previous;
    },
  };
  return voice;
}
