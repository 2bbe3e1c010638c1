// Types of the audio part of livegate's browser client (lib/audio/index.js).

import type { LiveSession } from "../index.js";

export declare const MIC_RATE: 16000;
export declare const PLAY_RATE: 24000;
export declare function levelFromRms(rms: number): number;
export interface AudioDevice { deviceId: string; label: string }
export declare function listDevices(kind?: "audioinput" | "audiooutput"): Promise<AudioDevice[]>;

export interface MicrophoneOptions {
  /** Every 20 ms while on and not muted: 640 bytes of PCM16 at 16 kHz, and its level (0..1). */
  onChunk?: (pcm: ArrayBuffer, level: number) => void;
  onLevel?: (level: number) => void;
  /** The device went away (unplugged, permission revoked). */
  onEnded?: () => void;
  deviceId?: string;
  echoCancellation?: boolean;
  noiseSuppression?: boolean;
  autoGainControl?: boolean;
}

export declare class Microphone {
  constructor(options?: MicrophoneOptions);
  onChunk: (pcm: ArrayBuffer, level: number) => void;
  onLevel: (level: number) => void;
  onEnded: () => void;
  readonly active: boolean;
  readonly muted: boolean;
  /** The last chunk's level, 0..1 (0 while muted). */
  readonly level: number;
  readonly deviceLabel: string;
  start(): Promise<void>;
  stop(): void;
  setMuted(muted: boolean): void;
  configure(options: Omit<MicrophoneOptions, "onChunk" | "onLevel" | "onEnded">): Promise<void>;
}

export interface PlaybackStats { played: number; buffered: number; flushes: number }

export declare class Player {
  constructor(options?: { onState?: (state: "none" | AudioContextState, hasAudio: boolean) => void; onStats?: (stats: PlaybackStats) => void; sinkId?: string });
  onState: (state: "none" | AudioContextState, hasAudio: boolean) => void;
  onStats: (stats: PlaybackStats) => void;
  readonly state: "none" | AudioContextState;
  readonly stats: PlaybackStats;
  /** Audio is waiting to be heard. */
  readonly playing: boolean;
  unlock(): void;
  unlockOnGesture(target?: EventTarget): void;
  setSinkId(sinkId: string): Promise<boolean>;
  play(pcm: ArrayBuffer, sampleRate?: number): void;
  flush(): void;
  level(): number;
  waveform(into: Uint8Array): boolean;
  close(): void;
}

export interface Voice {
  readonly microphone: Microphone;
  readonly player: Player;
  readonly mode: "vad" | "pushToTalk";
  readonly talking: boolean;
  setMode(mode: "vad" | "pushToTalk"): void;
  talk(pressed: boolean): void;
  start(): Promise<void>;
  stop(): void;
  detach(): void;
}

export declare function connectAudio(session: LiveSession, options?: { microphone?: Microphone; player?: Player; mode?: "vad" | "pushToTalk" }): Voice;
