// Types of livegate's browser client (lib/index.js). The protocol: docs/PROTOCOL.md.

/** An ADK event as the gateway sends it (camelCase JSON; absent fields omitted). */
export interface AdkEvent {
  id?: string;
  invocationId?: string;
  author?: string;
  timestamp?: number;
  modelVersion?: string;
  partial?: boolean;
  turnComplete?: boolean;
  turnCompleteReason?: string;
  interrupted?: boolean;
  errorCode?: string;
  errorMessage?: string;
  content?: { role?: string; parts?: AdkPart[] };
  inputTranscription?: { text?: string; finished?: boolean };
  outputTranscription?: { text?: string; finished?: boolean };
  usageMetadata?: Usage;
  customMetadata?: Record<string, unknown>;
  [field: string]: unknown;
}

export interface AdkPart {
  text?: string;
  thought?: boolean;
  inlineData?: { mimeType?: string; data?: string };
  fileData?: { fileUri?: string; mimeType?: string };
  functionCall?: { id?: string; name?: string; args?: Record<string, unknown> };
  functionResponse?: { id?: string; name?: string; response?: unknown };
  [field: string]: unknown;
}

export interface Usage {
  promptTokenCount?: number;
  candidatesTokenCount?: number;
  totalTokenCount?: number;
  [field: string]: unknown;
}

/** The live settings of a connection's first message (docs/PROTOCOL.md, "Setup message"). */
export interface LiveSettings {
  voice?: string;
  language?: string;
  input_transcription?: boolean;
  output_transcription?: boolean;
  vad?: boolean;
  start_sensitivity?: "high" | "low";
  end_sensitivity?: "high" | "low";
  prefix_padding_ms?: number;
  silence_duration_ms?: number;
  barge_in?: boolean;
  compression?: boolean;
  compression_trigger_tokens?: number;
  compression_target_tokens?: number;
  session_resumption?: boolean;
  proactivity?: boolean;
  affective_dialog?: boolean;
  max_llm_calls?: number;
  save_live_blob?: boolean;
  custom_metadata?: Record<string, unknown>;
}

export type TokenSource = string | null | (() => string | null | Promise<string | null>);

export interface LiveSessionOptions {
  /** The gateway, http(s):// or ws(s)://; default: this page's origin. */
  url?: string;
  userId: string;
  sessionId: string;
  /** A client token, or a function that fetches a fresh one (asked again near its expiry and after a refusal). */
  token?: TokenSource;
  /** Spoken answers (default) or text answers. */
  modality?: "AUDIO" | "TEXT";
  /** Model audio as binary frames (default) or base64 inside the events. */
  audio?: "binary" | "base64";
  settings?: LiveSettings;
  /** Reconnect after a drop (default), with these backoff limits; false: never. */
  reconnect?: false | { firstDelayMs?: number; maxDelayMs?: number; healthyMs?: number; maxAttempts?: number };
  /** After a reconnect, deliver the stored events a drop kept from the app (default true). */
  resume?: boolean;
  /** A WebSocket constructor (Node: the global one under --experimental-websocket, or `ws`). */
  WebSocket?: unknown;
  fetch?: typeof fetch;
}

export type Status = "idle" | "connecting" | "open" | "reconnecting" | "closed";

/** Why the session stopped retrying: retrying cannot fix it. */
export interface Fatal {
  kind: "unauthorized" | "forbidden" | "badRequest" | "takenOver" | "policy" | "model" | "gaveUp";
  code: string;
  message: string;
  /** What a person can do about it. */
  hint: string;
}

interface Of<E> {
  /** The ADK event it came from (null for audio whose event never came). */
  event: E;
  /** Delivered from the stored events after a reconnect, not live. */
  replayed?: boolean;
}

export interface TextEvent extends Of<AdkEvent> { type: "text"; text: string; partial: boolean; author: string; fromUser: boolean }
export interface AudioEvent extends Of<AdkEvent | null> { type: "audio"; pcm: ArrayBuffer; sampleRate: number }
export interface TranscriptionEvent extends Of<AdkEvent> { type: "inputTranscription" | "outputTranscription"; text: string; finished: boolean }
/** `background`: the model goes on while the call runs (its id is in `longRunningToolIds`: a non-blocking or long-running tool). */
export interface ToolCallEvent extends Of<AdkEvent> { type: "toolCall"; id: string | null; name: string; args: Record<string, unknown>; background: boolean }
/** `scheduling`: for a non-blocking call's result, when the model takes it up. */
export interface ToolResultEvent extends Of<AdkEvent> { type: "toolResult"; id: string | null; name: string; response: unknown; scheduling: "INTERRUPT" | "WHEN_IDLE" | "SILENT" | null }
export interface ToolCancelledEvent extends Of<AdkEvent> { type: "toolCancelled"; ids: string[] }
export interface RecordingEvent extends Of<AdkEvent> {
  type: "recording";
  uri: string;
  mimeType: string;
  name: string;
  side: "input" | "output" | null;
  at: number | null;
  version: number | null;
}
export interface UsageEvent extends Of<AdkEvent> { type: "usage"; usage: Usage }
export interface InterruptedEvent extends Of<AdkEvent> { type: "interrupted" }
export interface TurnCompleteEvent extends Of<AdkEvent> { type: "turnComplete"; reason: string | null }
export interface ErrorEvent { type?: "error"; code: string; message: string; event: AdkEvent | null; fatal: null }
export interface BinaryAudio { type: "audio"; data: string; sampleRate: number; event: AdkEvent }

/** What typedEvents() gives for one ADK event. */
export type TypedEvent =
  | TextEvent
  | BinaryAudio
  | TranscriptionEvent
  | ToolCallEvent
  | ToolResultEvent
  | ToolCancelledEvent
  | RecordingEvent
  | UsageEvent
  | InterruptedEvent
  | TurnCompleteEvent
  | { type: "error"; code: string; message: string; event: AdkEvent };

export interface LiveSessionEvents {
  status: { status: Status; retryInMs?: number; fatal?: Fatal };
  open: { reconnected: boolean };
  close: { code: number; reason: string; retryInMs: number | null; fatal: Fatal | null };
  fatal: Fatal;
  /** Every ADK event, once. */
  event: { event: AdkEvent; replayed: boolean };
  sent: { message: { type: string; [field: string]: unknown } };
  text: TextEvent;
  audio: AudioEvent;
  inputTranscription: TranscriptionEvent;
  outputTranscription: TranscriptionEvent;
  toolCall: ToolCallEvent;
  toolResult: ToolResultEvent;
  toolCancelled: ToolCancelledEvent;
  recording: RecordingEvent;
  usage: UsageEvent;
  interrupted: InterruptedEvent;
  turnComplete: TurnCompleteEvent;
  error: ErrorEvent;
  /** An answer in progress ended without turnComplete: the socket dropped, the app reconnected (new settings) or closed. */
  turnAborted: { reason: "dropped" | "reconnect" | "settings" | "closed" | string };
}

export declare const ID_PATTERN: RegExp;
export declare function newSessionId(): string;

export declare class LiveSession {
  constructor(options: LiveSessionOptions);
  readonly userId: string;
  readonly sessionId: string;
  readonly modality: "AUDIO" | "TEXT";
  readonly status: Status;
  /** Why it stopped retrying, once it has. */
  readonly fatal: Fatal | null;
  readonly isOpen: boolean;
  /** An answer is in progress. */
  readonly inTurn: boolean;
  /** The settings sent first on each connection. */
  settings: LiveSettings;
  /** The REST API, with this session's gateway and token. */
  readonly api: GatewayApi;
  on<K extends keyof LiveSessionEvents>(type: K, listener: (event: LiveSessionEvents[K]) => void): () => void;
  off<K extends keyof LiveSessionEvents>(type: K, listener: (event: LiveSessionEvents[K]) => void): void;
  /** Resolves once open; rejects (with `.fatal`) when retrying cannot help. */
  connect(): Promise<void>;
  reconnect(options?: { settings?: LiveSettings; reason?: string }): void;
  updateSettings(settings: LiveSettings): void;
  close(): void;
  wsUrl(): string;
  currentToken(): Promise<string | null>;
  loadHistory(options?: { max?: number }): Promise<{ events: AdkEvent[]; total: number }>;
  markSeen(events: AdkEvent[]): void;
  sendJson(message: { type: string; [field: string]: unknown }): boolean;
  sendText(text: string): boolean;
  sendImage(data: ArrayBuffer | Uint8Array | string, mimeType?: string): boolean;
  sendAudio(pcm: ArrayBuffer | ArrayBufferView): boolean;
  activityStart(): boolean;
  activityEnd(): boolean;
  audioStreamEnd(): boolean;
}

export interface SessionInfo { id: string; lastUpdateTime?: number; state?: Record<string, unknown>; [field: string]: unknown }
export interface ArtifactInfo { name: string; versions: number[]; mimeType?: string; size?: number }
export interface LiveInfo {
  model: string | null;
  provider: "sim" | "gemini" | "openai" | "other";
  voices: string[];
  clientSettings: string[];
  modality: "AUDIO" | "TEXT";
}

export declare class ApiError extends Error {
  constructor(status: number, message: string);
  /** The HTTP status; 0 for a network error. */
  status: number;
}

export declare class GatewayApi {
  constructor(options?: { url?: string; token?: TokenSource; fetch?: typeof fetch });
  currentToken(): Promise<string | null>;
  config(): Promise<{ auth: "none" | "token" }>;
  liveInfo(): Promise<LiveInfo>;
  listSessions(userId: string): Promise<SessionInfo[]>;
  events(userId: string, sessionId: string, page?: { offset?: number; limit?: number }): Promise<{ events: AdkEvent[]; total: number; state: Record<string, unknown> }>;
  history(userId: string, sessionId: string, options?: { max?: number }): Promise<{ events: AdkEvent[]; total: number }>;
  deleteSession(userId: string, sessionId: string): Promise<void>;
  artifacts(userId: string, sessionId: string): Promise<ArtifactInfo[]>;
  /** The session as a replay bundle: a tar of `events.jsonl`, `recordings/` and `bundle.json`. */
  exportBundle(userId: string, sessionId: string): Promise<Blob>;
  artifactUrl(userId: string, sessionId: string, name: string, version: number, format?: "wav" | "raw"): Promise<string>;
}

export type AgentState = "idle" | "listening" | "thinking" | "speaking";

export declare class AgentActivity {
  constructor(session: LiveSession, options?: { isPlaying?: () => boolean; isListening?: () => boolean; onChange?: (state: AgentState) => void });
  readonly state: AgentState;
  update(): void;
  detach(): void;
}

export declare function typedEvents(event: AdkEvent): TypedEvent[];
export interface TranscriptLine { role: "user" | "model"; text: string; kind: "text" | "speech"; at: number | null }
export declare function transcript(events: AdkEvent[]): TranscriptLine[];
export declare function transcriptToText(lines: TranscriptLine[], names?: { user?: string; model?: string }): string;
export declare function recordingOf(uri: string): { name: string; side: "input" | "output"; at: number; version: number | null } | null;
export declare function sampleRateOf(mimeType: string | null | undefined, fallback?: number): number;
export declare function base64ToBytes(text: string): Uint8Array;
export declare function bytesToBase64(bytes: Uint8Array): string;
export declare function fromUser(event: AdkEvent): boolean;

export declare const CloseCode: {
  readonly NORMAL: 1000;
  readonly GOING_AWAY: 1001;
  readonly ABNORMAL: 1006;
  readonly POLICY: 1008;
  readonly INTERNAL: 1011;
  readonly SERVICE_RESTART: 1012;
  readonly TRY_AGAIN_LATER: 1013;
  readonly TAKEN_OVER: 4000;
};
export declare function afterClose(close: { code: number; reason?: string; lastError?: { code?: string; message?: string } | null }): { retry: "now" | "backoff" | "never"; fatal: Fatal | null };
export declare function fatalError(error: { code?: string; message?: string } | null): Fatal | null;
export declare function fatalStatus(status: number, message?: string): Fatal | null;
export declare class Backoff {
  constructor(options?: { firstDelayMs?: number; maxDelayMs?: number; healthyMs?: number; random?: () => number });
  readonly attempts: number;
  closed(openedAt: number, closedAt: number): void;
  reset(): void;
  next(): number;
  soon(): number;
}

export interface TokenClaims { sub: string; session_id?: string; exp?: number; [claim: string]: unknown }
export declare function tokenClaims(jwt: string | null | undefined): TokenClaims | null;
export declare function tokenExpired(claims: TokenClaims | null, now?: number, skewSeconds?: number): boolean;
