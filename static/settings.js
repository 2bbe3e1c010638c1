// The live settings panel: voice, language, transcription and barge-in. The choices are sent as
// the connection's first message, `{"type":"setup", …}` (docs/PROTOCOL.md, "Setup message"), so a
// change takes effect by reconnecting. Only choices that differ from the gateway's are sent.

const STORE_KEY = "livegate.settings";

export const VOICES = ["Puck", "Charon", "Kore", "Fenrir", "Aoede", "Leda", "Orus", "Zephyr"];
export const LANGUAGES = [
  ["en-US", "English (US)"],
  ["en-GB", "English (UK)"],
  ["de-DE", "Deutsch"],
  ["fr-FR", "Français"],
  ["es-ES", "Español"],
  ["it-IT", "Italiano"],
  ["pt-BR", "Português (BR)"],
  ["nl-NL", "Nederlands"],
  ["ja-JP", "日本語"],
  ["hi-IN", "हिन्दी"],
];

export class SettingsPanel {
  /**
   * @param {object} o
   * @param {(id: string) => HTMLElement} o.$
   * @param {() => void} o.onChange  called after a choice changed (reconnect to apply it)
   */
  constructor({ $, onChange }) {
    this.voice = $("set-voice");
    this.language = $("set-language");
    this.transcription = $("set-transcription");
    this.bargeIn = $("set-barge-in");
    for (const name of VOICES) this.voice.add(new Option(name, name));
    for (const [code, label] of LANGUAGES) this.language.add(new Option(`${label} · ${code}`, code));
    this.restore();
    for (const el of [this.voice, this.language, this.transcription, this.bargeIn]) {
      el.addEventListener("change", () => {
        this.save();
        onChange();
      });
    }
  }

  /** The setup message for the current choices (only the non-default ones besides `type`). */
  setupMessage() {
    const message = { type: "setup" };
    if (this.voice.value) message.voice = this.voice.value;
    if (this.language.value) message.language = this.language.value;
    if (!this.transcription.checked) {
      message.input_transcription = false;
      message.output_transcription = false;
    }
    if (!this.bargeIn.checked) message.barge_in = false;
    return message;
  }

  /** True when the setup message would carry a setting. */
  get changed() {
    return Object.keys(this.setupMessage()).length > 1;
  }

  save() {
    const value = {
      voice: this.voice.value,
      language: this.language.value,
      transcription: this.transcription.checked,
      bargeIn: this.bargeIn.checked,
    };
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify(value));
    } catch {
      /* storage may be off (private mode): the choices last until reload */
    }
  }

  restore() {
    let saved = null;
    try {
      saved = JSON.parse(localStorage.getItem(STORE_KEY) || "null");
    } catch {
      saved = null;
    }
    if (!saved || typeof saved !== "object") return;
    if (VOICES.includes(saved.voice)) this.voice.value = saved.voice;
    if (LANGUAGES.some(([code]) => code === saved.language)) this.language.value = saved.language;
    if (typeof saved.transcription === "boolean") this.transcription.checked = saved.transcription;
    if (typeof saved.bargeIn === "boolean") this.bargeIn.checked = saved.bargeIn;
  }
}
