// The settings panel. Model settings (voice, language, transcription, barge-in, voice activity)
// are the connection's first message, `{"type":"setup", …}` (docs/PROTOCOL.md): only those the
// gateway lets clients change are offered, with the voices of the provider that answers, and a
// change reconnects. Audio settings (microphone mode and device, speaker, echo cancellation,
// noise suppression) apply at once, without reconnecting.

const STORE_KEY = "livegate.settings";

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

const MODEL = ["voice", "language", "transcription", "bargeIn", "vad", "silence", "endSensitivity"];
const AUDIO = ["talkMode", "micDevice", "speakerDevice", "echoCancel", "noiseSuppression"];

export class SettingsPanel {
  /**
   * @param {object} o
   * @param {(id: string) => HTMLElement} o.$
   * @param {() => void} o.onModelChange  a model setting changed: reconnect with setupMessage()
   * @param {(audio: object) => void} o.onAudioChange  an audio setting changed
   */
  constructor({ $, onModelChange, onAudioChange }) {
    this.$ = $;
    this.el = {
      voice: $("set-voice"),
      language: $("set-language"),
      transcription: $("set-transcription"),
      bargeIn: $("set-barge-in"),
      vad: $("set-vad"),
      silence: $("set-silence"),
      endSensitivity: $("set-end-sensitivity"),
      talkMode: $("talk-mode"),
      micDevice: $("mic-device"),
      speakerDevice: $("speaker-device"),
      echoCancel: $("echo-cancel"),
      noiseSuppression: $("noise-suppression"),
    };
    this.allowed = new Set(["voice", "language", "input_transcription", "output_transcription", "barge_in"]);
    this.saved = this.load();
    for (const [code, label] of LANGUAGES) this.el.language.add(new Option(`${label} · ${code}`, code));
    this.restore(["language", "transcription", "bargeIn", "vad", "silence", "endSensitivity", "talkMode", "echoCancel", "noiseSuppression"]);
    for (const name of MODEL) {
      this.el[name].addEventListener("change", () => {
        this.save();
        onModelChange();
      });
    }
    for (const name of AUDIO) {
      this.el[name].addEventListener("change", () => {
        this.save();
        onAudioChange(this.audio());
      });
    }
  }

  /** Offers what the gateway allows: `info` is GET /api/live's answer. */
  configure(info) {
    this.allowed = new Set(info.clientSettings || []);
    const voice = this.el.voice;
    voice.replaceChildren(new Option("gateway default", ""));
    for (const name of info.voices || []) voice.add(new Option(name, name));
    // A voice saved for another provider is not offered (nor sent).
    if ((info.voices || []).includes(this.saved.voice)) voice.value = this.saved.voice;
    const may = (name) => this.allowed.has(name);
    const set = (name, on, why) => {
      this.el[name].disabled = !on;
      this.el[name].closest("label").title = on ? "" : why;
    };
    const why = "The gateway does not let clients change this (--client-settings).";
    set("voice", may("voice"), why);
    set("language", may("language"), why);
    set("transcription", may("input_transcription") && may("output_transcription"), why);
    set("bargeIn", may("barge_in"), why);
    set("vad", may("vad"), why);
    set("silence", may("silence_duration_ms"), why);
    set("endSensitivity", may("end_sensitivity"), why);
    this.$("vad-note").hidden = may("vad");
  }

  /** The setup message for the current choices: the allowed ones that differ from the default. */
  setupMessage() {
    const e = this.el;
    const message = { type: "setup" };
    const may = (name) => this.allowed.has(name);
    if (e.voice.value && may("voice")) message.voice = e.voice.value;
    if (e.language.value && may("language")) message.language = e.language.value;
    if (!e.transcription.checked && may("input_transcription") && may("output_transcription")) {
      message.input_transcription = false;
      message.output_transcription = false;
    }
    if (!e.bargeIn.checked && may("barge_in")) message.barge_in = false;
    if (!e.vad.checked && may("vad")) message.vad = false;
    const silence = parseInt(e.silence.value, 10);
    if (Number.isFinite(silence) && silence >= 0 && silence <= 10000 && may("silence_duration_ms")) message.silence_duration_ms = silence;
    if (e.endSensitivity.value && may("end_sensitivity")) message.end_sensitivity = e.endSensitivity.value;
    return message;
  }

  /** The audio choices: {mode, micDevice, speakerDevice, echoCancellation, noiseSuppression}. */
  audio() {
    const e = this.el;
    return {
      mode: e.talkMode.value === "pushToTalk" ? "pushToTalk" : "vad",
      micDevice: e.micDevice.value,
      speakerDevice: e.speakerDevice.value,
      echoCancellation: e.echoCancel.checked,
      noiseSuppression: e.noiseSuppression.checked,
    };
  }

  /** True when the setup message carries a setting. */
  get changed() {
    return Object.keys(this.setupMessage()).length > 1;
  }

  /** Fills a device picker ("audioinput" → microphones, "audiooutput" → speakers). */
  devices(kind, devices, { supported = true } = {}) {
    const select = kind === "audioinput" ? this.el.micDevice : this.el.speakerDevice;
    const key = kind === "audioinput" ? "micDevice" : "speakerDevice";
    const current = select.value || this.saved[key] || "";
    select.replaceChildren(new Option("default", ""));
    for (const d of devices) if (d.deviceId && d.deviceId !== "default") select.add(new Option(d.label, d.deviceId));
    select.value = [...select.options].some((o) => o.value === current) ? current : "";
    select.disabled = !supported;
    select.closest("label").title = supported ? "" : "This browser plays on its default output only.";
  }

  value(el) {
    return el.type === "checkbox" ? el.checked : el.value;
  }

  save() {
    const value = {};
    for (const [name, el] of Object.entries(this.el)) value[name] = this.value(el);
    this.saved = value;
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify(value));
    } catch {
      /* storage may be off: the choices last until reload */
    }
  }

  load() {
    try {
      const saved = JSON.parse(localStorage.getItem(STORE_KEY) || "{}");
      return saved && typeof saved === "object" ? saved : {};
    } catch {
      return {};
    }
  }

  restore(names) {
    for (const name of names) {
      const el = this.el[name];
      const v = this.saved[name];
      if (el.type === "checkbox") {
        if (typeof v === "boolean") el.checked = v;
      } else if (typeof v === "string" && (el.tagName !== "SELECT" || [...el.options].some((o) => o.value === v))) {
        el.value = v;
      }
    }
  }
}
