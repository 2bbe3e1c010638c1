//! PCM16 audio kept as shared byte slices: the input track utterances are cut from, and utterances.
//!
//! Input chunks are kept as `Bytes` (reference-counted) rather than copied into sample vectors: the
//! flow's audio cache holds the same chunks, so an utterance costs the sim almost no memory.

use std::collections::VecDeque;

use bytes::Bytes;

/// Samples of PCM16 little-endian bytes (a trailing odd byte is ignored).
pub fn samples(bytes: &[u8]) -> impl Iterator<Item = i16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
}

/// PCM16 little-endian bytes of `samples`.
#[cfg(test)]
pub fn to_pcm(samples: &[i16]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// The whole-sample prefix of PCM16 bytes (drops a trailing odd byte).
pub fn whole_samples(bytes: Bytes) -> Bytes {
    let even = bytes.len() & !1;
    bytes.slice(..even)
}

/// PCM16 LE mono audio stored as a sequence of shared byte slices.
#[derive(Debug, Clone, Default)]
pub struct Pcm {
    /// Non-empty slices of whole samples, in order.
    parts: Vec<Bytes>,
    /// Index of each part's first sample.
    starts: Vec<usize>,
    /// Total samples.
    len: usize,
}

impl Pcm {
    /// Appends bytes of PCM16 (a trailing odd byte is dropped).
    pub fn push(&mut self, bytes: Bytes) {
        let bytes = whole_samples(bytes);
        if bytes.is_empty() {
            return;
        }
        self.starts.push(self.len);
        self.len += bytes.len() / 2;
        self.parts.push(bytes);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends to `out` the samples `start..end` (clamped to the audio).
    pub fn read_into(&self, start: usize, end: usize, out: &mut Vec<i16>) {
        let end = end.min(self.len);
        if start >= end {
            return;
        }
        // The part holding `start`: the last one starting at or before it.
        let first = self
            .starts
            .partition_point(|&s| s <= start)
            .saturating_sub(1);
        for (part, &part_start) in self.parts[first..].iter().zip(&self.starts[first..]) {
            if part_start >= end {
                break;
            }
            let from = start.saturating_sub(part_start);
            let to = (end - part_start).min(part.len() / 2);
            out.extend(samples(&part[from * 2..to * 2]));
        }
    }

    /// Every sample, in order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = i16> + '_ {
        self.parts.iter().flat_map(|p| samples(p))
    }
}

/// Chunk slots a [`Track`] keeps allocated however short its window gets (20 ms chunks: 0.6 s).
const TRACK_MIN_SLOTS: usize = 32;

/// A window on an input audio stream, addressed by sample index since the stream began.
#[derive(Debug, Default)]
pub struct Track {
    /// Chunks still kept, each with the index of its first sample.
    chunks: VecDeque<(u64, Bytes)>,
    /// Index after the last sample received.
    end: u64,
}

impl Track {
    /// Appends a chunk of whole samples.
    pub fn push(&mut self, bytes: Bytes) {
        let bytes = whole_samples(bytes);
        if bytes.is_empty() {
            return;
        }
        let len = bytes.len() as u64 / 2;
        self.chunks.push_back((self.end, bytes));
        self.end += len;
    }

    /// Index after the last sample received.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Drops chunks that end at or before sample `index`.
    pub fn forget_before(&mut self, index: u64) {
        while let Some((start, bytes)) = self.chunks.front() {
            if start + bytes.len() as u64 / 2 > index {
                break;
            }
            self.chunks.pop_front();
        }
        self.give_back_room();
    }

    /// Drops every chunk (the stream position is kept).
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.give_back_room();
    }

    /// Frees most of the room an utterance grew the window to once it is forgotten: between
    /// utterances the track keeps only a pre-roll, and a long utterance would otherwise leave its
    /// empty slots allocated for the rest of the session.
    fn give_back_room(&mut self) {
        let capacity = self.chunks.capacity();
        if capacity > TRACK_MIN_SLOTS && self.chunks.len() < capacity / 4 {
            self.chunks
                .shrink_to(TRACK_MIN_SLOTS.max(self.chunks.len() * 2));
        }
    }

    /// The samples `start..end` still kept, without copying them.
    pub fn slice(&self, start: u64, end: u64) -> Pcm {
        let mut pcm = Pcm::default();
        for (chunk_start, bytes) in &self.chunks {
            let chunk_end = chunk_start + bytes.len() as u64 / 2;
            if chunk_end <= start {
                continue;
            }
            if *chunk_start >= end {
                break;
            }
            let from = start.saturating_sub(*chunk_start) as usize;
            let to = (end.min(chunk_end) - chunk_start) as usize;
            pcm.push(bytes.slice(from * 2..to * 2));
        }
        pcm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(samples: impl IntoIterator<Item = i16>) -> Bytes {
        samples.into_iter().flat_map(i16::to_le_bytes).collect()
    }

    #[test]
    fn odd_trailing_bytes_are_ignored() {
        assert_eq!(samples(&[1, 0, 2]).collect::<Vec<_>>(), vec![1]);
        let mut track = Track::default();
        track.push(Bytes::from_static(&[1, 0, 2]));
        track.push(Bytes::from_static(&[7]));
        assert_eq!(track.end(), 1);
    }

    #[test]
    fn slices_span_chunks_and_read_back_exactly() {
        let mut track = Track::default();
        for c in 0..5 {
            track.push(bytes_of((0..10).map(|i| c * 10 + i)));
        }
        let pcm = track.slice(7, 33);
        assert_eq!(pcm.len(), 26);
        assert_eq!(pcm.iter().collect::<Vec<_>>(), (7..33).collect::<Vec<_>>());
        let mut out = Vec::new();
        pcm.read_into(2, 14, &mut out);
        assert_eq!(out, (9..21).collect::<Vec<_>>());
        track.forget_before(20);
        assert_eq!(track.slice(0, 50).iter().next(), Some(20));
    }

    #[test]
    fn a_forgotten_utterance_gives_its_room_back() {
        let mut track = Track::default();
        // A 6 s utterance in 20 ms chunks.
        for c in 0..300 {
            track.push(bytes_of((0..320).map(|i| (c * 320 + i) as i16)));
        }
        assert!(track.chunks.capacity() >= 300);
        track.forget_before(299 * 320);
        assert!(
            track.chunks.capacity() <= TRACK_MIN_SLOTS * 2,
            "{} slots kept for one chunk",
            track.chunks.capacity()
        );
        assert_eq!(
            track.slice(0, u64::MAX).len(),
            320,
            "the kept chunk is intact"
        );
        track.push(bytes_of(0..320));
        track.clear();
        assert!(track.chunks.capacity() <= TRACK_MIN_SLOTS * 2);
        assert_eq!(track.end(), 301 * 320);
    }
}
