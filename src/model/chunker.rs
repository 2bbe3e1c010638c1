//! Microphone audio re-framed into upstream chunks.
//!
//! Browsers send a frame every 8–20 ms; written upstream one message each, every frame costs a
//! base64 encode, a WebSocket frame, a TLS record and a `writev` that, on the way out, does the
//! receiving end's TCP work too: most of what a session costs a gateway in front of a model
//! server. Google's streaming guide recommends 20–100 ms per message. The chunker gathers PCM
//! audio until a chunk's worth is in hand, or until the first of it has waited a chunk's length
//! (a client that stops sending is never left with audio held), and lets everything else through
//! in order, after the audio held before it.

use bytes::{Bytes, BytesMut};
use tokio::time::{Duration, Instant};

use super::LiveInput;
use crate::event::Blob;

/// Default of the audio chunker's chunk length: the low-latency end of Google's range. A 20 ms
/// frame (this gateway's page, most clients) is a chunk already and goes out as it came; 8 ms
/// browser frames (ADK's bidi-demo page) go out three to a message, the first held at most 16 ms.
/// Longer chunks trade latency for CPU: 40 ms saved a gateway in front of a model server about a
/// tenth of its CPU with 20 ms frames, and put up to 20 ms on the first answer chunk.
pub const DEFAULT_AUDIO_CHUNK: Duration = Duration::from_millis(20);

/// Longest chunk accepted: Google's guide stops at 100 ms, and every millisecond held is a
/// millisecond later answer.
pub const MAX_AUDIO_CHUNK: Duration = Duration::from_millis(100);

/// Sample rate of PCM whose mime type names none (Gemini's and the gateway's input rate).
const DEFAULT_RATE: u32 = 16_000;

/// PCM audio gathered for one upstream message.
#[derive(Debug)]
struct Gathered {
    data: BytesMut,
    mime_type: String,
    /// When the newest frame in it was read from the client.
    received: Option<std::time::Instant>,
    /// Bytes that make it a chunk.
    target: usize,
    /// When it goes out whether full or not.
    due: Instant,
}

/// Gathers PCM audio into chunks of at least `chunk`; zero lets every input through as it came.
#[derive(Debug)]
pub(crate) struct AudioChunker {
    chunk: Duration,
    held: Option<Gathered>,
}

/// What is ready to send after one input: held audio that had to go first, then the input or the
/// chunk it completed.
pub(crate) type Ready = [Option<LiveInput>; 2];

impl AudioChunker {
    pub(crate) fn new(chunk: Duration) -> Self {
        AudioChunker {
            chunk: chunk.min(MAX_AUDIO_CHUNK),
            held: None,
        }
    }

    /// Takes one input at `now`; returns what is ready to send, in order.
    pub(crate) fn push(&mut self, input: LiveInput, now: Instant) -> Ready {
        let blob = match input {
            LiveInput::Realtime(blob) if !self.chunk.is_zero() && blob.is_pcm() => blob,
            // Anything else goes out after the audio sent before it.
            other => return [self.take(), Some(other)],
        };
        let earlier = match &self.held {
            Some(held) if held.mime_type != blob.mime_type => self.take(),
            _ => None,
        };
        let Some(held) = &mut self.held else {
            let target = self.target(&blob);
            if blob.data.len() >= target {
                // A chunk already: out as it is, without a copy.
                return [earlier, Some(LiveInput::Realtime(blob))];
            }
            let mut data = BytesMut::with_capacity(target);
            data.extend_from_slice(&blob.data);
            self.held = Some(Gathered {
                data,
                mime_type: blob.mime_type,
                received: blob.received,
                target,
                due: now + self.chunk,
            });
            return [earlier, None];
        };
        held.data.extend_from_slice(&blob.data);
        held.received = blob.received.or(held.received);
        if held.data.len() >= held.target {
            return [earlier, self.take()];
        }
        [earlier, None]
    }

    /// When the audio held must go out even if no more comes; `None` when nothing is held.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.held.as_ref().map(|held| held.due)
    }

    /// The audio held, as one input; `None` when nothing is held.
    pub(crate) fn take(&mut self) -> Option<LiveInput> {
        let held = self.held.take()?;
        Some(LiveInput::Realtime(Blob {
            data: Bytes::from(held.data),
            display_name: None,
            mime_type: held.mime_type,
            received: held.received,
        }))
    }

    /// Bytes of `blob`'s audio that make a chunk: whole 16-bit samples.
    fn target(&self, blob: &Blob) -> usize {
        let rate = u128::from(blob.sample_rate().unwrap_or(DEFAULT_RATE));
        let samples = rate * self.chunk.as_micros() / 1_000_000;
        usize::try_from(samples * 2).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIME: &str = "audio/pcm;rate=16000";

    fn frame(byte: u8, len: usize) -> LiveInput {
        LiveInput::Realtime(Blob::new(Bytes::from(vec![byte; len]), MIME))
    }

    fn data(input: &Option<LiveInput>) -> Vec<u8> {
        match input {
            Some(LiveInput::Realtime(blob)) => blob.data.to_vec(),
            other => panic!("expected audio, got {other:?}"),
        }
    }

    #[test]
    fn two_20_ms_frames_make_one_40_ms_chunk() {
        let mut chunker = AudioChunker::new(Duration::from_millis(40));
        let now = Instant::now();
        assert_eq!(chunker.push(frame(1, 640), now), [None, None]);
        assert_eq!(chunker.due(), Some(now + Duration::from_millis(40)));
        let [earlier, chunk] = chunker.push(frame(2, 640), now);
        assert_eq!(earlier, None);
        let mut want = vec![1; 640];
        want.extend(vec![2; 640]);
        assert_eq!(data(&chunk), want);
        assert_eq!(chunker.due(), None, "nothing held after a chunk went out");
    }

    #[test]
    fn the_chunk_length_follows_the_rate() {
        let mut chunker = AudioChunker::new(Duration::from_millis(40));
        let at_24k =
            || LiveInput::Realtime(Blob::new(Bytes::from(vec![0; 960]), "audio/pcm;rate=24000"));
        let now = Instant::now();
        assert_eq!(chunker.push(at_24k(), now), [None, None]);
        assert_eq!(data(&chunker.push(at_24k(), now)[1]).len(), 1920);
        // 8 ms browser frames (256 bytes at 16 kHz): five to a chunk.
        for _ in 0..4 {
            assert_eq!(chunker.push(frame(0, 256), now), [None, None]);
        }
        assert_eq!(data(&chunker.push(frame(0, 256), now)[1]).len(), 1280);
    }

    #[test]
    fn zero_lets_every_frame_through() {
        let mut chunker = AudioChunker::new(Duration::ZERO);
        let [earlier, now] = chunker.push(frame(1, 640), Instant::now());
        assert_eq!((earlier, data(&now).len()), (None, 640));
        assert_eq!(chunker.due(), None);
    }

    #[test]
    fn a_frame_of_a_chunk_or_more_goes_out_uncopied() {
        let mut chunker = AudioChunker::new(Duration::from_millis(40));
        let big = Bytes::from(vec![7; 3200]);
        let [earlier, out] = chunker.push(
            LiveInput::Realtime(Blob::new(big.clone(), MIME)),
            Instant::now(),
        );
        assert_eq!(earlier, None);
        let Some(LiveInput::Realtime(blob)) = out else {
            panic!("expected audio")
        };
        assert_eq!(
            blob.data.as_ptr(),
            big.as_ptr(),
            "the same bytes, not a copy"
        );
    }

    #[test]
    fn anything_else_goes_out_after_the_audio_held_before_it() {
        let mut chunker = AudioChunker::new(Duration::from_millis(40));
        let now = Instant::now();
        chunker.push(frame(1, 640), now);
        let [earlier, then] = chunker.push(LiveInput::ActivityEnd, now);
        assert_eq!(data(&earlier), vec![1; 640]);
        assert_eq!(then, Some(LiveInput::ActivityEnd));
        // Video is not gathered either.
        chunker.push(frame(2, 640), now);
        let jpeg = LiveInput::Realtime(Blob::new(Bytes::from_static(b"\xff\xd8"), "image/jpeg"));
        let [earlier, then] = chunker.push(jpeg.clone(), now);
        assert_eq!(data(&earlier), vec![2; 640]);
        assert_eq!(then, Some(jpeg));
        assert_eq!(chunker.due(), None);
    }

    #[test]
    fn a_new_rate_sends_what_was_held_at_the_old_one() {
        let mut chunker = AudioChunker::new(Duration::from_millis(40));
        let now = Instant::now();
        chunker.push(frame(1, 640), now);
        let other =
            LiveInput::Realtime(Blob::new(Bytes::from(vec![2; 960]), "audio/pcm;rate=24000"));
        let [earlier, then] = chunker.push(other, now);
        assert_eq!(data(&earlier), vec![1; 640]);
        assert_eq!(then, None, "the 24 kHz frame is held on its own");
        let Some(LiveInput::Realtime(held)) = chunker.take() else {
            panic!("expected the 24 kHz frame")
        };
        assert_eq!(held.mime_type, "audio/pcm;rate=24000");
    }

    #[test]
    fn held_audio_is_due_a_chunk_after_its_first_frame_and_keeps_the_newest_read_time() {
        let mut chunker = AudioChunker::new(Duration::from_millis(40));
        let start = Instant::now();
        let read = std::time::Instant::now();
        let mut late = Blob::new(Bytes::from(vec![0; 320]), MIME);
        late.received = Some(read);
        chunker.push(frame(0, 320), start);
        chunker.push(LiveInput::Realtime(late), start + Duration::from_millis(10));
        assert_eq!(chunker.due(), Some(start + Duration::from_millis(40)));
        let Some(LiveInput::Realtime(blob)) = chunker.take() else {
            panic!("expected audio")
        };
        assert_eq!((blob.data.len(), blob.received), (640, Some(read)));
        assert_eq!(chunker.take(), None);
    }

    #[test]
    fn chunks_are_capped_at_100_ms() {
        let mut chunker = AudioChunker::new(Duration::from_secs(5));
        let now = Instant::now();
        for _ in 0..4 {
            assert_eq!(chunker.push(frame(0, 640), now), [None, None]);
        }
        assert_eq!(data(&chunker.push(frame(0, 640), now)[1]).len(), 3200);
    }
}
