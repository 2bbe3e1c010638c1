// Type-checks the declarations as an app uses them (`tsc -p test/tsconfig.json`, in .ci/run).

import { LiveSession, GatewayApi, AgentActivity, typedEvents, transcript, transcriptToText, tokenClaims, afterClose, type Fatal, type AdkEvent } from "../lib/index.js";
import { connectAudio, Microphone, Player, listDevices } from "../lib/audio/index.js";

const session = new LiveSession({
  userId: "u1",
  sessionId: "s1",
  token: async () => (await fetch("/token")).text(),
  settings: { voice: "Kore", vad: false, silence_duration_ms: 500 },
  reconnect: { maxAttempts: 10 },
});
session.on("text", (t) => {
  const s: string = t.text;
  const partial: boolean = t.partial;
  void [s, partial];
});
session.on("audio", (a) => new Int16Array(a.pcm).length * a.sampleRate);
session.on("toolCall", (c) => c.args["timezone"]);
session.on("fatal", (f: Fatal) => f.hint.length);
session.on("close", (c) => (c.fatal ? c.fatal.kind : c.retryInMs));
session.on("turnAborted", (t) => t.reason);
session.sendText("hello");
session.sendImage(new Uint8Array([1, 2, 3]), "image/png");
session.sendAudio(new Int16Array(320));
session.updateSettings({ voice: "Puck" });
const history: Promise<{ events: AdkEvent[]; total: number }> = session.loadHistory({ max: 100 });
void history;

const api = new GatewayApi({ url: "http://127.0.0.1:8080", token: "t" });
api.liveInfo().then((info) => info.voices.includes("Kore") && info.provider === "openai");
api.listSessions("u1").then((sessions) => sessions.map((s) => s.id));

const voice = connectAudio(session, { microphone: new Microphone({ echoCancellation: false }), player: new Player(), mode: "pushToTalk" });
voice.talk(true);
voice.setMode("vad");
voice.microphone.setMuted(true);
voice.player.setSinkId("").then((ok: boolean) => ok);
listDevices("audiooutput").then((d) => d.map((x) => x.label));

const activity = new AgentActivity(session, { isPlaying: () => voice.player.playing, onChange: (s) => s === "thinking" });
activity.update();

for (const t of typedEvents({ turnComplete: true })) if (t.type === "turnComplete") void t.reason;
transcriptToText(transcript([]));
tokenClaims("a.b.c")?.sub;
afterClose({ code: 1012 }).retry satisfies "now" | "backoff" | "never";
