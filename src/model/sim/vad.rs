//! An energy voice-activity detector: frame RMS against a threshold, with start and end hysteresis.
//!
//! It works on sample indices, not sample copies: the session keeps the audio (see `pcm::Track`) and
//! cuts utterances out of it with the indices reported here.

/// Length of one analysis frame.
const FRAME_MS: u64 = 20;
/// Audio kept before the first loud frame, so soft onsets are not clipped.
const PRE_ROLL_MS: u64 = 100;
/// An utterance longer than this is ended where it stands (bounds memory and latency).
const MAX_UTTERANCE_MS: u64 = 30_000;

/// Detector settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VadSettings {
    /// Frame RMS level, in dBFS, at or above which a frame is speech.
    pub threshold_dbfs: f32,
    /// Speech needed before an utterance starts, in milliseconds.
    pub min_speech_ms: u32,
    /// Silence that ends an utterance, in milliseconds.
    pub silence_ms: u32,
}

/// What the detector found in the audio just fed to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VadEvent {
    /// An utterance started (after the minimum speech time).
    Start,
    /// An utterance ended; its samples are `start..end` (stream indices).
    End {
        /// First sample (with a little pre-roll before the first loud frame).
        start: u64,
        /// Sample after the last loud frame.
        end: u64,
    },
}

#[derive(Debug, Clone, Copy)]
enum State {
    Idle,
    /// Loud frames seen, but not yet enough to call it speech.
    Candidate {
        start: u64,
        loud: u32,
        quiet: u32,
    },
    Speaking {
        start: u64,
        last_loud_end: u64,
        quiet: u32,
    },
}

/// An energy VAD over one stream of PCM16 samples at one rate.
#[derive(Debug)]
pub struct Vad {
    frame_len: u64,
    /// Sum of squares a frame must reach to be loud (threshold² × frame length).
    loud_energy: f64,
    min_speech_frames: u32,
    /// Quiet frames a candidate may contain before it is dropped as noise.
    gap_frames: u32,
    silence_frames: u32,
    pre_roll: u64,
    max_len: u64,
    /// Sum of squares of the current frame so far (a 384 kHz frame of full-scale samples is
    /// ~2^43, far inside `u64`).
    energy: u64,
    in_frame: u64,
    /// Samples consumed since the stream began.
    pos: u64,
    /// End of the last utterance: pre-roll never reaches back into it.
    floor: u64,
    state: State,
}

impl Vad {
    /// A detector for audio at `rate` Hz.
    pub fn new(settings: VadSettings, rate: u32) -> Self {
        let rate = u64::from(rate.max(1));
        let frame_len = (rate * FRAME_MS / 1000).max(1);
        let threshold = 32768.0 * 10f64.powf(f64::from(settings.threshold_dbfs) / 20.0);
        let frames = |ms: u32| (u64::from(ms).div_ceil(FRAME_MS)).clamp(1, 10_000) as u32;
        Vad {
            frame_len,
            loud_energy: threshold * threshold * frame_len as f64,
            min_speech_frames: frames(settings.min_speech_ms),
            gap_frames: frames(settings.min_speech_ms),
            silence_frames: frames(settings.silence_ms),
            pre_roll: rate * PRE_ROLL_MS / 1000,
            max_len: rate * MAX_UTTERANCE_MS / 1000,
            energy: 0,
            in_frame: 0,
            pos: 0,
            floor: 0,
            state: State::Idle,
        }
    }

    /// Whether an utterance is in progress (started and not yet ended).
    #[cfg(test)]
    pub fn speaking(&self) -> bool {
        matches!(self.state, State::Speaking { .. })
    }

    /// Feeds PCM16 little-endian audio (a trailing odd byte is ignored); appends what happened
    /// to `events`, in order.
    pub fn push(&mut self, pcm: &[u8], events: &mut Vec<VadEvent>) {
        let mut rest = &pcm[..pcm.len() & !1];
        while !rest.is_empty() {
            // Up to the end of the current analysis frame, summed in one tight loop.
            let room = usize::try_from((self.frame_len - self.in_frame) * 2).unwrap_or(usize::MAX);
            let (span, tail) = rest.split_at(room.min(rest.len()));
            rest = tail;
            let n = (span.len() / 2) as u64;
            self.energy += energy(span);
            self.in_frame += n;
            self.pos += n;
            if self.in_frame == self.frame_len {
                let loud = self.energy as f64 >= self.loud_energy;
                self.energy = 0;
                self.in_frame = 0;
                self.frame_done(loud, events);
            }
        }
    }

    /// Ends the utterance in progress now (audio stream end); its samples, if there was one.
    pub fn finish(&mut self) -> Option<(u64, u64)> {
        let ended = match self.state {
            State::Speaking {
                start,
                last_loud_end,
                ..
            } => Some((self.with_pre_roll(start), last_loud_end)),
            _ => None,
        };
        self.state = State::Idle;
        self.energy = 0;
        self.in_frame = 0;
        self.floor = self.pos;
        ended
    }

    /// The earliest sample a future utterance can include: audio before it may be forgotten.
    pub fn keep_from(&self) -> u64 {
        match self.state {
            State::Idle => self.with_pre_roll(self.pos - self.in_frame),
            State::Candidate { start, .. } | State::Speaking { start, .. } => {
                self.with_pre_roll(start)
            }
        }
    }

    fn with_pre_roll(&self, start: u64) -> u64 {
        start.saturating_sub(self.pre_roll).max(self.floor)
    }

    fn frame_done(&mut self, loud: bool, events: &mut Vec<VadEvent>) {
        let frame_start = self.pos - self.frame_len;
        self.state = match (self.state, loud) {
            (State::Idle, false) => State::Idle,
            (State::Idle, true) => self.candidate(frame_start, 1, events),
            (State::Candidate { start, loud, .. }, true) => self.candidate(start, loud + 1, events),
            (State::Candidate { start, loud, quiet }, false) => {
                if quiet + 1 > self.gap_frames {
                    // A click or a breath, too short to be speech.
                    State::Idle
                } else {
                    State::Candidate {
                        start,
                        loud,
                        quiet: quiet + 1,
                    }
                }
            }
            (State::Speaking { start, .. }, true) => {
                if self.pos - start >= self.max_len {
                    self.end(start, self.pos, events)
                } else {
                    State::Speaking {
                        start,
                        last_loud_end: self.pos,
                        quiet: 0,
                    }
                }
            }
            (
                State::Speaking {
                    start,
                    last_loud_end,
                    quiet,
                },
                false,
            ) => {
                if quiet + 1 >= self.silence_frames {
                    self.end(start, last_loud_end, events)
                } else {
                    State::Speaking {
                        start,
                        last_loud_end,
                        quiet: quiet + 1,
                    }
                }
            }
        };
    }

    fn candidate(&mut self, start: u64, loud: u32, events: &mut Vec<VadEvent>) -> State {
        if loud >= self.min_speech_frames {
            events.push(VadEvent::Start);
            State::Speaking {
                start,
                last_loud_end: self.pos,
                quiet: 0,
            }
        } else {
            State::Candidate {
                start,
                loud,
                quiet: 0,
            }
        }
    }

    fn end(&mut self, start: u64, end: u64, events: &mut Vec<VadEvent>) -> State {
        events.push(VadEvent::End {
            start: self.with_pre_roll(start),
            end,
        });
        self.floor = end;
        State::Idle
    }
}

/// Root mean square of samples in dBFS (-inf for silence).
#[cfg(test)]
pub fn rms_dbfs(samples: &[i16]) -> f64 {
    if samples.is_empty() {
        return f64::NEG_INFINITY;
    }
    let sum: f64 = samples.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
    20.0 * ((sum / samples.len() as f64).sqrt() / 32768.0).log10()
}

/// Sum of squares of PCM16 little-endian samples (integer, so the loop vectorizes).
fn energy(pcm: &[u8]) -> u64 {
    pcm.chunks_exact(2)
        .map(|b| {
            let s = i32::from(i16::from_le_bytes([b[0], b[1]]));
            u64::from((s * s).unsigned_abs())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sim::pcm::to_pcm;

    const SETTINGS: VadSettings = VadSettings {
        threshold_dbfs: -40.0,
        min_speech_ms: 100,
        silence_ms: 500,
    };

    /// A 16 kHz tone at about -20 dBFS.
    fn tone(ms: usize) -> Vec<i16> {
        (0..ms * 16)
            .map(|i| ((i as f32 * 0.2).sin() * 4000.0) as i16)
            .collect()
    }

    fn silence(ms: usize) -> Vec<i16> {
        vec![0; ms * 16]
    }

    fn run(vad: &mut Vad, audio: &[i16]) -> Vec<VadEvent> {
        let mut events = Vec::new();
        // Odd chunk sizes: frames must not depend on how the audio was cut.
        for chunk in audio.chunks(333) {
            vad.push(&to_pcm(chunk), &mut events);
        }
        events
    }

    #[test]
    fn finds_an_utterance_between_silences_with_pre_roll() {
        let mut vad = Vad::new(SETTINGS, 16_000);
        let audio = [silence(300), tone(1000), silence(600)].concat();
        let events = run(&mut vad, &audio);
        assert_eq!(
            events,
            vec![
                VadEvent::Start,
                VadEvent::End {
                    start: 16 * 200,
                    end: 16 * 1300
                }
            ]
        );
        assert!(!vad.speaking());
        assert!(rms_dbfs(&tone(100)) > -25.0);
    }

    #[test]
    fn short_pauses_stay_inside_one_utterance() {
        let mut vad = Vad::new(SETTINGS, 16_000);
        let audio = [tone(400), silence(300), tone(400), silence(600)].concat();
        let events = run(&mut vad, &audio);
        assert_eq!(
            events,
            vec![
                VadEvent::Start,
                VadEvent::End {
                    start: 0,
                    end: 16 * 1100
                }
            ]
        );
    }

    #[test]
    fn clicks_are_not_speech() {
        let mut vad = Vad::new(SETTINGS, 16_000);
        let audio = [tone(40), silence(200), tone(40), silence(600)].concat();
        assert!(run(&mut vad, &audio).is_empty());
        assert_eq!(vad.finish(), None);
    }

    #[test]
    fn finish_ends_the_utterance_in_progress() {
        let mut vad = Vad::new(SETTINGS, 16_000);
        let audio = [silence(60), tone(300)].concat();
        assert_eq!(run(&mut vad, &audio), vec![VadEvent::Start]);
        assert!(vad.speaking());
        assert_eq!(vad.finish(), Some((0, 16 * 360)));
        assert_eq!(
            vad.keep_from(),
            16 * 360,
            "nothing before the flush is needed"
        );
    }

    #[test]
    fn very_long_speech_is_cut() {
        let mut vad = Vad::new(SETTINGS, 1_000);
        let audio: Vec<i16> = (0..31_000)
            .map(|i| if i % 2 == 0 { 4000 } else { -4000 })
            .collect();
        let mut events = Vec::new();
        vad.push(&to_pcm(&audio), &mut events);
        assert!(
            matches!(events[1], VadEvent::End { start: 0, end } if end == 30_000),
            "{events:?}"
        );
    }
}
