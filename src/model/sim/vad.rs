//! An energy voice-activity detector: finds utterances in 16-bit PCM by frame RMS with hysteresis.

/// What the detector saw in the audio just fed to it.
#[derive(Debug, Clone, PartialEq)]
pub enum VadEvent {
    /// Speech started (after the minimum speech time).
    SpeechStart,
    /// Speech ended (after the end-of-speech silence); the utterance's samples.
    SpeechEnd(Vec<i16>),
}

/// Detector settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VadConfig {
    /// Frame RMS (0..1 of full scale) above which a frame counts as speech.
    pub threshold: f32,
    /// Speech needed before a start is declared, in milliseconds.
    pub min_speech_ms: u32,
    /// Silence needed before an end is declared, in milliseconds.
    pub silence_ms: u32,
}

/// An energy VAD over a stream of samples at one rate.
#[derive(Debug)]
pub struct Vad {
    config: VadConfig,
    frame_len: usize,
    frame: Vec<i16>,
    /// Samples of the current (candidate) utterance, from its first loud frame.
    utterance: Vec<i16>,
    /// Length of `utterance` at its last loud frame.
    speech_end: usize,
    loud_frames: u32,
    quiet_frames: u32,
    speaking: bool,
}

const FRAME_MS: u32 = 20;

impl Vad {
    /// A detector for audio at `rate` Hz.
    pub fn new(config: VadConfig, rate: u32) -> Self {
        let frame_len = (rate as usize * FRAME_MS as usize / 1000).max(1);
        Vad {
            config,
            frame_len,
            frame: Vec::with_capacity(frame_len),
            utterance: Vec::new(),
            speech_end: 0,
            loud_frames: 0,
            quiet_frames: 0,
            speaking: false,
        }
    }

    /// Whether an utterance is in progress.
    pub fn speaking(&self) -> bool {
        self.speaking
    }

    /// Feeds samples; returns what happened, in order.
    pub fn feed(&mut self, samples: &[i16]) -> Vec<VadEvent> {
        let mut events = Vec::new();
        for &sample in samples {
            self.frame.push(sample);
            if self.frame.len() == self.frame_len {
                let frame = std::mem::take(&mut self.frame);
                self.frame_done(&frame, &mut events);
                self.frame = frame;
                self.frame.clear();
            }
        }
        events
    }

    /// Ends the current utterance now (stream end, manual activity end).
    pub fn finish(&mut self) -> Option<Vec<i16>> {
        let had_speech = self.speaking || self.loud_frames > 0;
        self.utterance.append(&mut self.frame);
        let utterance = std::mem::take(&mut self.utterance);
        let end = if self.speaking {
            self.speech_end.max(1).min(utterance.len())
        } else {
            utterance.len()
        };
        self.reset();
        (had_speech && !utterance.is_empty()).then(|| utterance[..end].to_vec())
    }

    fn reset(&mut self) {
        self.utterance.clear();
        self.speech_end = 0;
        self.loud_frames = 0;
        self.quiet_frames = 0;
        self.speaking = false;
    }

    fn frame_done(&mut self, frame: &[i16], events: &mut Vec<VadEvent>) {
        let loud = rms(frame) >= self.config.threshold;
        if loud {
            self.utterance.extend_from_slice(frame);
            self.speech_end = self.utterance.len();
            self.loud_frames += 1;
            self.quiet_frames = 0;
            if !self.speaking && self.loud_frames * FRAME_MS >= self.config.min_speech_ms {
                self.speaking = true;
                events.push(VadEvent::SpeechStart);
            }
        } else if self.speaking {
            self.utterance.extend_from_slice(frame);
            self.quiet_frames += 1;
            if self.quiet_frames * FRAME_MS >= self.config.silence_ms {
                let mut utterance = std::mem::take(&mut self.utterance);
                utterance.truncate(self.speech_end);
                self.reset();
                events.push(VadEvent::SpeechEnd(utterance));
            }
        } else if self.loud_frames > 0 {
            // A click or a breath, too short to be speech: forget it.
            self.reset();
        }
    }
}

/// Root mean square of samples, as a fraction of full scale.
pub fn rms(samples: &[i16]) -> f32 {
    if samples.is_empty() {
        return 0.0;
    }
    let sum: f64 = samples.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
    ((sum / samples.len() as f64).sqrt() / 32768.0) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(ms: usize) -> Vec<i16> {
        (0..ms * 16)
            .map(|i| ((i as f32 * 0.2).sin() * 8000.0) as i16)
            .collect()
    }

    #[test]
    fn finds_an_utterance_between_silences() {
        let config = VadConfig {
            threshold: 0.01,
            min_speech_ms: 100,
            silence_ms: 400,
        };
        let mut vad = Vad::new(config, 16_000);
        let mut audio = vec![0i16; 16 * 300];
        audio.extend(tone(1000));
        audio.extend(vec![0i16; 16 * 600]);
        let events = vad.feed(&audio);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0], VadEvent::SpeechStart);
        let VadEvent::SpeechEnd(utterance) = &events[1] else {
            panic!()
        };
        assert_eq!(utterance.len(), 16 * 1000, "exactly the loud part");
        assert!(!vad.speaking());
    }

    #[test]
    fn ignores_clicks_and_finishes_on_demand() {
        let config = VadConfig {
            threshold: 0.01,
            min_speech_ms: 100,
            silence_ms: 400,
        };
        let mut vad = Vad::new(config, 16_000);
        assert!(vad.feed(&tone(40)).is_empty());
        assert!(vad.feed(&vec![0; 16 * 100]).is_empty());
        assert_eq!(vad.finish(), None);
        assert_eq!(vad.feed(&tone(200)), vec![VadEvent::SpeechStart]);
        assert_eq!(vad.finish().map(|u| u.len()), Some(16 * 200));
    }
}
