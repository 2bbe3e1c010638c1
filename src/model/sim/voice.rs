//! The sim's voice: a deterministic speech-like synthesizer, and the 16→24 kHz resampler of the echo.

use std::f32::consts::TAU;

/// Output sample rate.
pub const OUTPUT_RATE: u32 = 24_000;

/// Synthesizes words as voiced, vowel-like tones; returns the samples and each word's start sample.
pub fn speak(words: &[&str]) -> (Vec<i16>, Vec<usize>) {
    let mut samples = Vec::new();
    let mut starts = Vec::with_capacity(words.len());
    for word in words {
        starts.push(samples.len());
        let letters = word.chars().filter(|c| c.is_alphanumeric()).count().max(1);
        let ms = (70 * letters).clamp(160, 480);
        let n = OUTPUT_RATE as usize * ms / 1000;
        let seed = word
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        let f0 = 115.0 + (seed % 50) as f32;
        let formant = 500.0 + (seed % 700) as f32;
        for i in 0..n {
            let t = i as f32 / OUTPUT_RATE as f32;
            // A gentle pitch glide makes it sound spoken rather than sung.
            let f = f0 * (1.0 + 0.08 * (1.0 - i as f32 / n as f32));
            let mut v = 0.0;
            for k in 1..=8 {
                let h = f * k as f32;
                let weight = 1.0 / (1.0 + ((h - formant) / 300.0).powi(2)) / k as f32;
                v += weight * (TAU * h * t).sin();
            }
            let attack = (i as f32 / (OUTPUT_RATE as f32 * 0.02)).min(1.0);
            let release = ((n - i) as f32 / (OUTPUT_RATE as f32 * 0.04)).min(1.0);
            samples.push((v * attack * release * 9000.0).clamp(-32767.0, 32767.0) as i16);
        }
        // A short pause between words.
        samples.extend(std::iter::repeat_n(0, OUTPUT_RATE as usize * 60 / 1000));
    }
    (samples, starts)
}

/// Resamples PCM from `from` Hz to 24 kHz by linear interpolation; `round(n * 24000 / from)` samples.
pub fn resample_to_output(input: &[i16], from: u32) -> Vec<i16> {
    if input.is_empty() || from == 0 {
        return Vec::new();
    }
    let out_len = ((input.len() as u64 * u64::from(OUTPUT_RATE) + u64::from(from) / 2)
        / u64::from(from)) as usize;
    let step = f64::from(from) / f64::from(OUTPUT_RATE);
    (0..out_len)
        .map(|i| {
            let pos = i as f64 * step;
            let j = pos as usize;
            let frac = pos - j as f64;
            let a = f64::from(input[j.min(input.len() - 1)]);
            let b = f64::from(input[(j + 1).min(input.len() - 1)]);
            (a + (b - a) * frac).round() as i16
        })
        .collect()
}

/// PCM16 little-endian bytes of samples.
pub fn to_bytes(samples: &[i16]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// Samples of PCM16 little-endian bytes (a trailing odd byte is ignored).
pub fn from_bytes(bytes: &[u8]) -> Vec<i16> {
    bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sim::vad::rms;

    #[test]
    fn speech_is_audible_and_deterministic() {
        let (a, starts) = speak(&["hello", "there"]);
        assert_eq!(starts.len(), 2);
        assert!(rms(&a) > 0.05, "audible");
        assert_eq!(speak(&["hello", "there"]).0, a, "deterministic");
    }

    #[test]
    fn resampling_keeps_the_length_exact() {
        assert_eq!(resample_to_output(&vec![100; 16_000], 16_000).len(), 24_000);
        assert_eq!(resample_to_output(&vec![100; 45_760], 16_000).len(), 68_640);
        assert_eq!(from_bytes(&[1, 0, 2]), vec![1]);
    }
}
