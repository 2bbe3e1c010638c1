//! The sim's voice: a deterministic speech-like synthesizer, and the 24 kHz echo of an utterance.
//!
//! Both render any sample range on demand, so an answer never holds its whole audio in memory:
//! with a thousand sessions speaking at once, only the chunk being sent exists.

use std::f32::consts::TAU;
use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};

use super::pcm::Pcm;

/// Output sample rate.
pub const OUTPUT_RATE: u32 = 24_000;

/// The mime type of output audio.
pub const OUTPUT_MIME: &str = "audio/pcm;rate=24000";

/// What an answer sounds like: 24 kHz PCM16 that can be rendered by sample range.
#[derive(Debug, Clone)]
pub enum Voice {
    /// The user's own utterance, resampled to 24 kHz.
    Echo(Echo),
    /// Synthesized speech for words of text.
    Synth(Synth),
}

impl Voice {
    /// Length in output samples.
    pub fn len(&self) -> usize {
        match self {
            Voice::Echo(echo) => echo.len,
            Voice::Synth(synth) => synth.len,
        }
    }

    /// True when the voice has no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// PCM16 LE bytes of output samples `start..end` (clamped to the voice).
    pub fn render(&self, start: usize, end: usize) -> Bytes {
        let end = end.min(self.len());
        let mut out = BytesMut::with_capacity(end.saturating_sub(start) * 2);
        match self {
            Voice::Echo(echo) => echo.render(start, end, &mut out),
            Voice::Synth(synth) => synth.render(start, end, &mut out),
        }
        out.freeze()
    }
}

/// Output samples (24 kHz) for `n` input samples at `rate`: `round(n * 24000 / rate)`.
pub fn echo_len(n: usize, rate: u32) -> usize {
    let rate = u128::from(rate.max(1));
    ((n as u128 * u128::from(OUTPUT_RATE) + rate / 2) / rate) as usize
}

/// An utterance resampled to 24 kHz by linear interpolation.
#[derive(Debug, Clone)]
pub struct Echo {
    pcm: Pcm,
    /// Input samples per `den` output samples, reduced (16 kHz: 2 per 3).
    num: u64,
    den: u64,
    len: usize,
}

impl Echo {
    /// The echo of `pcm`, recorded at `rate` Hz.
    pub fn new(pcm: Pcm, rate: u32) -> Self {
        let rate = rate.max(1);
        let g = gcd(u64::from(rate), u64::from(OUTPUT_RATE));
        Echo {
            len: echo_len(pcm.len(), rate),
            num: u64::from(rate) / g,
            den: u64::from(OUTPUT_RATE) / g,
            pcm,
        }
    }

    fn render(&self, start: usize, end: usize, out: &mut BytesMut) {
        let n = self.pcm.len();
        if start >= end || n == 0 {
            return;
        }
        // Output sample i sits at input position i * num / den; fetch the input span once,
        // padded with the last sample so that every `j + 1` below is in range.
        let first = (start as u64 * self.num / self.den) as usize;
        let last = ((end as u64 - 1) * self.num / self.den) as usize + 1;
        let mut input = Vec::with_capacity(last + 1 - first);
        self.pcm.read_into(first.min(n - 1), last + 1, &mut input);
        let pad = input.last().copied().unwrap_or(0);
        input.resize(last + 1 - first, pad);
        let from = out.len();
        out.resize(from + (end - start) * 2, 0);
        let out = &mut out[from..];
        // Input position of output sample `start`, less `first`: whole samples and a remainder.
        let rem = (start as u64 * self.num) % self.den;
        if (self.num, self.den) == (2, 3) {
            thirds(&input, rem, out);
        } else {
            interpolate(&input, rem, self.num, self.den, out);
        }
    }
}

/// [`interpolate`] for 16 kHz input, what microphones send: every 3 output samples take 2 input
/// samples at the fixed fractions 0, 2/3 and 4/3, so whole groups need no stepping and divide
/// only by the constant 3.
fn thirds(input: &[i16], rem: u64, out: &mut [u8]) {
    // Remainder r (thirds) reaches the next input sample after r outputs, each stepping 2/3 of
    // a sample: r outputs step exactly r input samples, to the first whole group.
    let head = (rem as usize).min(out.len() / 2);
    let (head_out, rest) = out.split_at_mut(head * 2);
    interpolate(input, rem, 2, 3, head_out);
    let input = &input[head.min(input.len())..];
    let groups = (rest.len() / 6).min(input.len().saturating_sub(1) / 2);
    let (body, tail) = rest.split_at_mut(groups * 6);
    // round(n / 3) for n in ±3 * 2^15, where n / 3 is never a tie: floor((n + 1) / 3), taken
    // on a non-negative numerator so that plain unsigned division is a floor.
    let third = |n: i32| ((n + 1 + 3 * 32_768) as u32 / 3) as i32 - 32_768;
    for (group, x) in body.chunks_exact_mut(6).zip(input.windows(3).step_by(2)) {
        let (x0, x1, x2) = (i32::from(x[0]), i32::from(x[1]), i32::from(x[2]));
        let samples = [x0, third(x0 + 2 * x1), third(2 * x1 + x2)];
        for (bytes, sample) in group.chunks_exact_mut(2).zip(samples) {
            bytes.copy_from_slice(&(sample as i16).to_le_bytes());
        }
    }
    interpolate(&input[(2 * groups).min(input.len())..], 0, 2, 3, tail);
}

/// Linear interpolation into `out` (PCM16 LE) of output samples starting `rem / den` past
/// `input[0]`, each `num / den` input samples after the last, rounded half away from zero.
///
/// Exact integer arithmetic: `input` must reach one sample past the last position.
fn interpolate(input: &[i16], mut rem: u64, num: u64, den: u64, out: &mut [u8]) {
    let den_i = den as i64;
    let mut j = 0;
    for bytes in out.chunks_exact_mut(2) {
        let (a, b) = (i64::from(input[j]), i64::from(input[j + 1]));
        let r = rem as i64;
        // den * (a + (b - a) * rem / den); both terms are at most 2^15 * den, den <= 24,000.
        let scaled = a * (den_i - r) + b * r;
        let half = if scaled < 0 { -den_i } else { den_i };
        let sample = ((2 * scaled + half) / (2 * den_i)) as i16;
        bytes.copy_from_slice(&sample.to_le_bytes());
        // Step the position instead of dividing for every output sample.
        rem += num;
        while rem >= den {
            rem -= den;
            j += 1;
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Samples in one period of a vowel wavetable.
const TABLE_LEN: usize = 512;
/// Pitch the vowel tables are shaped for.
const TABLE_F0: f32 = 140.0;
/// Target RMS of a vowel table (about -11 dBFS; with envelopes and pauses speech sits near -12).
const TABLE_RMS: f32 = 0.28;

/// One period of each vowel (a, e, i, o, u): harmonics of the glottal pulse shaped by two formants.
fn vowel_tables() -> &'static [[f32; TABLE_LEN]; 5] {
    static TABLES: OnceLock<[[f32; TABLE_LEN]; 5]> = OnceLock::new();
    TABLES.get_or_init(|| {
        const FORMANTS: [(f32, f32); 5] = [
            (730.0, 1090.0),
            (530.0, 1840.0),
            (300.0, 2290.0),
            (570.0, 840.0),
            (320.0, 870.0),
        ];
        let mut tables = [[0f32; TABLE_LEN]; 5];
        for (table, (f1, f2)) in tables.iter_mut().zip(FORMANTS) {
            let resonance =
                |f: f32, center: f32, width: f32| 1.0 / (1.0 + ((f - center) / width).powi(2));
            let harmonics: Vec<f32> = (1..=28)
                .map(|k| {
                    let f = TABLE_F0 * k as f32;
                    let shape = 0.15 + resonance(f, f1, 110.0) + 0.7 * resonance(f, f2, 160.0);
                    shape / (k as f32).powf(0.8)
                })
                .collect();
            for (i, value) in table.iter_mut().enumerate() {
                let phase = i as f32 / TABLE_LEN as f32;
                *value = harmonics
                    .iter()
                    .enumerate()
                    .map(|(k, a)| a * (TAU * (k + 1) as f32 * phase).sin())
                    .sum();
            }
            let rms = (table.iter().map(|v| v * v).sum::<f32>() / TABLE_LEN as f32).sqrt();
            let peak = table.iter().fold(0f32, |m, v| m.max(v.abs()));
            let gain = (TABLE_RMS / rms.max(1e-6)).min(0.9 / peak.max(1e-6));
            table.iter_mut().for_each(|v| *v *= gain);
        }
        tables
    })
}

#[derive(Debug, Clone, Copy)]
enum Sound {
    /// A vowel at pitch `f0` (Hz), gliding by `glide` (a fraction of f0) to the end.
    Voiced { vowel: u8, f0: f32, glide: f32 },
    /// A consonant-like noise burst.
    Noise { seed: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    start: usize,
    len: usize,
    sound: Sound,
}

/// Synthesized speech: per word a short noise onset for some consonants, then one voiced vowel
/// per syllable, with pitch and pauses following the punctuation. Deterministic.
#[derive(Debug, Clone, Default)]
pub struct Synth {
    segments: Vec<Segment>,
    word_starts: Vec<usize>,
    len: usize,
    /// Times the default voice's pitch.
    pitch: f32,
}

const fn ms(ms: usize) -> usize {
    ms * OUTPUT_RATE as usize / 1000
}

/// How much higher (or lower) than the default a prebuilt voice speaks: each name its own pitch,
/// so a voice setting is audible in the sim as it is on a real model.
pub fn voice_pitch(name: Option<&str>) -> f32 {
    const VOICES: [(&str, f32); 8] = [
        ("puck", 1.0),
        ("charon", 0.78),
        ("fenrir", 0.9),
        ("orus", 0.84),
        ("kore", 1.5),
        ("aoede", 1.62),
        ("leda", 1.74),
        ("zephyr", 1.38),
    ];
    let Some(name) = name else {
        return 1.0;
    };
    let lower = name.to_ascii_lowercase();
    match VOICES.iter().find(|(voice, _)| *voice == lower) {
        Some((_, pitch)) => *pitch,
        // Any other name: a pitch of its own between 0.75 and 1.75.
        None => {
            let hash = lower.bytes().fold(2_166_136_261u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(16_777_619)
            });
            0.75 + (hash % 1000) as f32 / 1000.0
        }
    }
}

impl Synth {
    /// Speech for whitespace-separated words, in the default voice.
    pub fn speak(text: &str) -> Self {
        Synth::speak_at(text, 1.0)
    }

    /// Speech for whitespace-separated words, `pitch` times the default voice's pitch.
    pub fn speak_at(text: &str, pitch: f32) -> Self {
        let mut synth = Synth {
            pitch: if pitch.is_finite() {
                pitch.clamp(0.5, 2.0)
            } else {
                1.0
            },
            ..Synth::default()
        };
        for (index, word) in text.split_whitespace().enumerate() {
            synth.word(index, word);
        }
        synth
    }

    /// The first sample of each word.
    pub fn word_starts(&self) -> &[usize] {
        &self.word_starts
    }

    fn word(&mut self, index: usize, word: &str) {
        self.word_starts.push(self.len);
        let lower = word.to_lowercase();
        let seed = lower.bytes().fold(2_166_136_261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16_777_619)
        }) ^ (index as u32).wrapping_mul(0x9E37_79B9);
        let letters = lower.chars().filter(|c| c.is_alphanumeric()).count();
        let mut remaining = ms(170 + 12 * letters.min(7));
        if lower
            .chars()
            .find(|c| c.is_alphanumeric())
            .is_some_and(|c| "cfhjkpqstxz".contains(c))
        {
            let len = ms(40);
            self.push(len, Sound::Noise { seed });
            remaining -= len;
        }
        let mut vowels: Vec<u8> = vowel_groups(&lower);
        if vowels.is_empty() {
            vowels.push((seed % 5) as u8);
        }
        vowels.truncate(3);
        let question = word.ends_with('?');
        let sentence_end = question || word.ends_with('.') || word.ends_with('!');
        let syllables = vowels.len();
        let gap = ms(15);
        let syllable_len = (remaining - gap * (syllables - 1)) / syllables;
        for (i, vowel) in vowels.into_iter().enumerate() {
            let last = i + 1 == syllables;
            // Stress on the first syllable, a fall at the end of a sentence, a rise on questions.
            let f0 =
                (132.0 + (seed >> 8) as f32 % 24.0 + if i == 0 { 12.0 } else { 0.0 }) * self.pitch;
            let glide = match (last, question, sentence_end) {
                (true, true, _) => 0.25,
                (true, false, true) => -0.22,
                _ => -0.08,
            };
            self.push(syllable_len, Sound::Voiced { vowel, f0, glide });
            if !last {
                self.len += gap;
            }
        }
        self.len += if sentence_end {
            ms(260)
        } else if word.ends_with([',', ';', ':']) {
            ms(160)
        } else {
            ms(50)
        };
    }

    fn push(&mut self, len: usize, sound: Sound) {
        self.segments.push(Segment {
            start: self.len,
            len,
            sound,
        });
        self.len += len;
    }

    fn render(&self, start: usize, end: usize, out: &mut BytesMut) {
        let tables = vowel_tables();
        let mut index = self.segments.partition_point(|s| s.start + s.len <= start);
        for i in start..end {
            while self
                .segments
                .get(index)
                .is_some_and(|s| s.start + s.len <= i)
            {
                index += 1;
            }
            let value = match self.segments.get(index) {
                Some(segment) if segment.start <= i => segment.sample(i - segment.start, tables),
                _ => 0.0,
            };
            out.put_i16_le((value * 32767.0).clamp(-32767.0, 32767.0) as i16);
        }
    }
}

/// The fractional part of a non-negative `x` below 2^31: one conversion instruction, where
/// `f32::fract` calls libm's `truncf` on baseline x86-64 (twice per synthesized sample).
fn positive_fract(x: f32) -> f32 {
    x - (x as u32) as f32
}

impl Segment {
    /// Sample `i` of this segment, in -1..1.
    fn sample(&self, i: usize, tables: &[[f32; TABLE_LEN]; 5]) -> f32 {
        let rate = OUTPUT_RATE as f32;
        let t = i as f32 / rate;
        let duration = self.len as f32 / rate;
        match self.sound {
            Sound::Voiced { vowel, f0, glide } => {
                // Pitch f0 * (1 + glide * t / T): its integral gives the phase in cycles.
                let cycles = f0 * (t + glide * t * t / (2.0 * duration));
                let x = positive_fract(cycles) * TABLE_LEN as f32;
                let table = &tables[usize::from(vowel).min(4)];
                let j = x as usize % TABLE_LEN;
                let (a, b) = (table[j], table[(j + 1) % TABLE_LEN]);
                let envelope = (t / 0.015).min(1.0) * ((duration - t) / 0.035).clamp(0.0, 1.0);
                (a + (b - a) * positive_fract(x)) * envelope
            }
            Sound::Noise { seed } => {
                let mut x = (i as u32).wrapping_mul(0x9E37_79B1) ^ seed;
                x ^= x >> 15;
                x = x.wrapping_mul(0x85EB_CA77);
                x ^= x >> 13;
                let white = x as f32 / u32::MAX as f32 * 2.0 - 1.0;
                let envelope = (t / 0.01).min(1.0) * ((duration - t) / 0.01).clamp(0.0, 1.0);
                white * 0.08 * envelope
            }
        }
    }
}

/// The vowel (0..5 = a, e, i, o, u) of each group of vowel letters in a word.
fn vowel_groups(word: &str) -> Vec<u8> {
    let mut groups = Vec::new();
    let mut in_group = false;
    for c in word.chars() {
        let vowel = match c {
            'a' => Some(0),
            'e' => Some(1),
            'i' | 'y' => Some(2),
            'o' => Some(3),
            'u' => Some(4),
            _ => None,
        };
        match vowel {
            Some(v) if !in_group => {
                groups.push(v);
                in_group = true;
            }
            Some(_) => {}
            None => in_group = false,
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sim::pcm::samples;
    use crate::model::sim::vad::rms_dbfs;

    fn all(voice: &Voice) -> Vec<i16> {
        samples(&voice.render(0, voice.len())).collect()
    }

    #[test]
    fn speech_is_audible_deterministic_and_word_paced() {
        let synth = Synth::speak("Hello there, how are you today?");
        assert_eq!(synth.word_starts().len(), 6);
        let per_word = synth.len as f64 / 6.0 / f64::from(OUTPUT_RATE);
        assert!((0.2..0.4).contains(&per_word), "{per_word} s per word");
        let voice = Voice::Synth(synth.clone());
        let pcm = all(&voice);
        let level = rms_dbfs(&pcm);
        assert!((-16.0..-9.0).contains(&level), "{level} dBFS");
        assert_eq!(
            all(&Voice::Synth(Synth::speak(
                "Hello there, how are you today?"
            ))),
            pcm
        );
        // Any range renders the same samples as the whole.
        let part: Vec<i16> = samples(&voice.render(1234, 5678)).collect();
        assert_eq!(part, pcm[1234..5678]);
    }

    /// The pitch of the first voiced sound, in Hz: the strongest autocorrelation lag of 50 ms
    /// of it, among those of 60 to 400 Hz.
    fn pitch_hz(pcm: &[i16]) -> f64 {
        let onset = pcm.iter().position(|s| s.abs() > 5000).unwrap();
        let window: Vec<f64> = pcm[onset + 600..onset + 1800]
            .iter()
            .map(|&s| f64::from(s))
            .collect();
        let lags = OUTPUT_RATE as usize / 400..=OUTPUT_RATE as usize / 60;
        let best = lags
            .max_by(|&a, &b| {
                let r = |lag: usize| -> f64 {
                    let n = window.len() - lag;
                    (0..n).map(|i| window[i] * window[i + lag]).sum::<f64>() / n as f64
                };
                r(a).total_cmp(&r(b))
            })
            .unwrap();
        f64::from(OUTPUT_RATE) / best as f64
    }

    #[test]
    fn each_voice_has_its_own_pitch() {
        let text = "Hello there, how are you today?";
        let default = all(&Voice::Synth(Synth::speak(text)));
        let puck = all(&Voice::Synth(Synth::speak_at(
            text,
            voice_pitch(Some("Puck")),
        )));
        assert_eq!(puck, default, "Puck is the default voice");
        let kore = all(&Voice::Synth(Synth::speak_at(
            text,
            voice_pitch(Some("Kore")),
        )));
        let charon = all(&Voice::Synth(Synth::speak_at(
            text,
            voice_pitch(Some("charon")),
        )));
        assert_eq!(kore.len(), default.len(), "same words, same timing");
        let (low, mid, high) = (pitch_hz(&charon), pitch_hz(&default), pitch_hz(&kore));
        assert!(
            (1.35..1.65).contains(&(high / mid)),
            "{mid} Hz, Kore {high} Hz"
        );
        assert!(
            (0.7..0.86).contains(&(low / mid)),
            "{mid} Hz, Charon {low} Hz"
        );
        assert_ne!(voice_pitch(Some("Achernar")), voice_pitch(Some("Gacrux")));
        assert!((0.75..=1.75).contains(&voice_pitch(Some("Achernar"))));
    }

    #[test]
    fn echo_is_exactly_one_and_a_half_times_longer_and_follows_the_input() {
        let mut pcm = Pcm::default();
        let input: Vec<i16> = (0..1001).map(|i| (i * 30) as i16).collect();
        for chunk in input.chunks(77) {
            pcm.push(chunk.iter().flat_map(|s| s.to_le_bytes()).collect());
        }
        let voice = Voice::Echo(Echo::new(pcm, 16_000));
        assert_eq!(voice.len(), 1502);
        assert_eq!(echo_len(45_760, 16_000), 68_640);
        assert_eq!(echo_len(3, 16_000), 5);
        let out = all(&voice);
        assert_eq!(out.len(), 1502);
        assert_eq!(out[3], input[2]);
        assert_eq!(out[4], 80, "interpolated between 60 and 90");
        let part: Vec<i16> = samples(&voice.render(500, 1000)).collect();
        assert_eq!(part, out[500..1000]);
        assert_eq!(echo_len(100, 48_000), 50);
    }

    #[test]
    fn short_echoes_render_the_same_in_every_range() {
        for n in 1..40 {
            let input: Vec<i16> = (0..n)
                .map(|i: i32| (i * 9_973 % 60_000 - 30_000) as i16)
                .collect();
            for rate in [16_000, 8_000, 44_100] {
                let mut pcm = Pcm::default();
                pcm.push(input.iter().flat_map(|s| s.to_le_bytes()).collect());
                let voice = Voice::Echo(Echo::new(pcm, rate));
                let out = all(&voice);
                for start in 0..=out.len() + 1 {
                    for end in start..=out.len() + 1 {
                        let part: Vec<i16> = samples(&voice.render(start, end)).collect();
                        let want = &out[start.min(out.len())..end.min(out.len())];
                        assert_eq!(part, want, "{n} samples at {rate}: {start}..{end}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_echo_matches_plain_linear_interpolation_at_any_rate_and_in_any_pieces() {
        let input: Vec<i16> = (0..4_321)
            .map(|i: i32| ((i * 7919) % 65_536 - 32_768) as i16)
            .collect();
        for rate in [8_000, 11_025, 16_000, 22_050, 44_100, 48_000] {
            let mut pcm = Pcm::default();
            for chunk in input.chunks(333) {
                pcm.push(chunk.iter().flat_map(|s| s.to_le_bytes()).collect());
            }
            let echo = Echo::new(pcm, rate);
            let (num, den) = (echo.num, echo.den);
            let voice = Voice::Echo(echo);
            let out = all(&voice);
            assert_eq!(out.len(), echo_len(input.len(), rate));
            for (i, &got) in out.iter().enumerate() {
                // Output sample i at input position i * num / den, clamped to the last sample.
                let (j, rem) = ((i as u64 * num / den) as usize, i as u64 * num % den);
                let j = j.min(input.len() - 1);
                let (a, b) = (
                    f64::from(input[j]),
                    f64::from(input[(j + 1).min(input.len() - 1)]),
                );
                // Exact in f64: a tie is a multiple of 0.5, and `round` takes it away from zero.
                let want = ((a * (den - rem) as f64 + b * rem as f64) / den as f64).round();
                assert_eq!(f64::from(got), want, "rate {rate} sample {i}");
            }
            let pieces: Vec<i16> = [(0, 1000), (1000, 1007), (1007, 1008), (1008, out.len())]
                .iter()
                .flat_map(|&(from, to)| samples(&voice.render(from, to)).collect::<Vec<_>>())
                .collect();
            assert_eq!(pieces, out, "rate {rate}");
        }
    }
}
