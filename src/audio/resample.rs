//! A streaming PCM16 resampler: chunks in at one rate, chunks out at another, with the filter
//! state carried from chunk to chunk so that chunk boundaries do not click. OpenAI Realtime's
//! 16 → 24 kHz and a phone call's 8 ↔ 16 / 24 kHz use the same one.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler as _};

/// Resampling chunk length: clients and carriers send 20 ms of audio per frame.
const CHUNK_MS: u32 = 20;
/// Input rates accepted (a client's `rate=` parameter, bounded).
const RATES: std::ops::RangeInclusive<u32> = 8_000..=96_000;

/// One stream's resampler from `from` Hz to `to` Hz, mono PCM16 little-endian.
pub struct Resampler {
    from: u32,
    to: u32,
    fft: Fft<f32>,
    /// Input samples not yet resampled (less than one chunk between calls).
    pending: Vec<f32>,
    /// Output scratch space, one chunk long.
    scratch: Vec<f32>,
}

impl std::fmt::Debug for Resampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resampler")
            .field("from", &self.from)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl Resampler {
    /// A resampler, or `None` for a rate outside 8–96 kHz.
    pub fn new(from: u32, to: u32) -> Option<Self> {
        if !RATES.contains(&from) || !RATES.contains(&to) {
            return None;
        }
        let chunk = (from * CHUNK_MS / 1000) as usize;
        let fft = Fft::<f32>::new(from as usize, to as usize, chunk, 1, FixedSync::Both).ok()?;
        let scratch = vec![0.0; fft.output_frames_max()];
        Some(Resampler {
            from,
            to,
            fft,
            pending: Vec::with_capacity(chunk * 2),
            scratch,
        })
    }

    /// The input rate.
    pub fn from(&self) -> u32 {
        self.from
    }

    /// The output rate.
    pub fn to(&self) -> u32 {
        self.to
    }

    /// Takes PCM16 bytes (an odd last byte is dropped) and returns what is ready at the new rate.
    pub fn push(&mut self, pcm: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.push_into(pcm, &mut out);
        out
    }

    /// Takes PCM16 bytes and appends what is ready at the new rate to `out`: with `out` kept
    /// between calls, a stream of frames is resampled without allocating.
    pub fn push_into(&mut self, pcm: &[u8], out: &mut Vec<u8>) {
        self.pending.extend(
            pcm.chunks_exact(2)
                .map(|s| f32::from(i16::from_le_bytes([s[0], s[1]])) / 32768.0),
        );
        while self.pending.len() >= self.fft.input_frames_next() {
            self.process(None, out);
        }
    }

    /// Resamples what is left, padded with silence to a whole chunk.
    pub fn flush(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.flush_into(&mut out);
        out
    }

    /// [`Resampler::flush`] into `out`, then ready for a new stream: the filter's memory of the
    /// last one is cleared too.
    pub fn flush_into(&mut self, out: &mut Vec<u8>) {
        if !self.pending.is_empty() {
            let partial = Indexing {
                input_offset: 0,
                output_offset: 0,
                partial_len: Some(self.pending.len()),
                active_channels_mask: None,
            };
            self.process(Some(&partial), out);
        }
        self.reset();
    }

    /// Drops what is pending and the filter's memory: the next push starts a new stream (an
    /// interrupted answer's rest must not bleed into the next one).
    pub fn reset(&mut self) {
        self.pending.clear();
        self.fft.reset();
    }

    fn process(&mut self, indexing: Option<&Indexing>, out: &mut Vec<u8>) {
        let needed = self.fft.input_frames_next();
        // A partial chunk is read from a full-length buffer; the resampler pads it with silence.
        if self.pending.len() < needed {
            self.pending.resize(needed, 0.0);
        }
        let frames = self.scratch.len();
        let written = match (
            InterleavedSlice::new(&self.pending[..needed], 1, needed),
            InterleavedSlice::new_mut(&mut self.scratch, 1, frames),
        ) {
            (Ok(input), Ok(mut output)) => self
                .fft
                .process_into_buffer(&input, &mut output, indexing)
                .map(|(_, written)| written)
                .unwrap_or(0),
            _ => 0,
        };
        self.pending.drain(..needed.min(self.pending.len()));
        if indexing.is_some() {
            self.pending.clear();
        }
        out.reserve(written * 2);
        for sample in &self.scratch[..written] {
            let value = (sample * 32768.0).round().clamp(-32768.0, 32767.0) as i16;
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(rate: u32, ms: u32, hz: f32) -> Vec<u8> {
        (0..rate * ms / 1000)
            .flat_map(|i| {
                let t = i as f32 / rate as f32;
                (((t * hz * std::f32::consts::TAU).sin() * 8000.0) as i16).to_le_bytes()
            })
            .collect()
    }

    #[test]
    fn sixteen_to_twenty_four_khz_keeps_length_and_has_no_seams() {
        let mut up = Resampler::new(16_000, 24_000).unwrap();
        let input = tone(16_000, 1000, 440.0);
        let mut out = Vec::new();
        // Odd-sized pieces: the resampler's chunks do not line up with the client's.
        for piece in input.chunks(614) {
            out.extend(up.push(piece));
        }
        out.extend(up.flush());
        let samples: Vec<i16> = out
            .chunks_exact(2)
            .map(|s| i16::from_le_bytes([s[0], s[1]]))
            .collect();
        assert!(
            (samples.len() as i64 - 24_000).abs() <= 480,
            "{} samples",
            samples.len()
        );
        // A 440 Hz tone at 24 kHz moves at most about 920 per sample at this level; a click at
        // a chunk boundary would jump far more.
        let delay = 2_000;
        let max_step = samples[delay..samples.len() - 1_000]
            .windows(2)
            .map(|w| (i32::from(w[1]) - i32::from(w[0])).abs())
            .max()
            .unwrap();
        assert!(max_step < 1_200, "a jump of {max_step}");
    }

    #[test]
    fn unusable_rates_are_refused() {
        assert!(Resampler::new(0, 24_000).is_none());
        assert!(Resampler::new(1_000_000, 24_000).is_none());
    }
}
