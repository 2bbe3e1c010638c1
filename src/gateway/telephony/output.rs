//! The call's way out: the run's events as carrier messages for the writer. Model audio is
//! resampled to 8 kHz, encoded as μ-law and sent as `media`, each followed by a `mark` naming the
//! answer and how far into it the audio ends; `interrupted` becomes `clear`, and what the caller
//! heard of the answer (its last acknowledged mark, and the transcript up to there) is reported;
//! everything else the caller is not sent, only counted and timed.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

use super::carrier::Carrier;
use crate::audio::{g711, resample::Resampler};
use crate::event::Event;
use crate::gateway::telemetry::metrics::RunMeter;
use crate::gateway::ws::codec::EncodedEvent;
use crate::gateway::ws::writer::WriterCommand;
use crate::latch::Latch;
use crate::live::flow::RECORDING_DROPPED;
use crate::lock::Recover;
use crate::model::Playout;

/// The phone's rate.
pub const PHONE_RATE: u32 = 8_000;
/// The rate the models' audio comes at (Gemini Live, OpenAI Realtime, the sim): the call's
/// resampler is built for it before the first answer, not on its first frame.
const MODEL_OUTPUT_RATE: u32 = 24_000;
/// μ-law bytes per millisecond at 8 kHz.
const BYTES_PER_MS: usize = 8;
/// The mark after the goodbye message.
pub const GOODBYE_MARK: &str = "goodbye";
/// Most transcript kept per answer to report what the caller heard.
const MAX_TRANSCRIPT_BYTES: usize = 16 * 1024;

/// How far the caller has heard the answers, from the marks the phone acknowledges; shared by
/// the call's reader (which reads the acknowledgements) and its output (which numbers answers).
#[derive(Debug, Default)]
pub struct Playback {
    /// The answer whose audio goes out now; acknowledgements of earlier ones are stale (a
    /// `clear` has the phone acknowledge every mark it dropped).
    answer: u64,
    /// How much of it the caller has heard.
    heard: Duration,
}

/// [`Playback`] behind its lock.
#[derive(Debug, Clone, Default)]
pub struct SharedPlayback(Arc<Mutex<Playback>>);

impl SharedPlayback {
    fn lock(&self) -> MutexGuard<'_, Playback> {
        self.0.lock_or_recover()
    }

    /// A mark came back: if it is the current answer's, the caller has heard that far. Returns
    /// the position heard, if it moved.
    pub fn acknowledged(&self, name: &str) -> Option<Duration> {
        let (answer, ms) = name.split_once(':')?;
        let (answer, ms): (u64, u64) = (answer.parse().ok()?, ms.parse().ok()?);
        let mut playback = self.lock();
        let heard = Duration::from_millis(ms);
        (answer == playback.answer && heard > playback.heard).then(|| {
            playback.heard = heard;
            heard
        })
    }

    /// The answer ends (completed or interrupted): how much of it was heard; later marks of it
    /// are stale.
    fn next_answer(&self) -> Duration {
        let mut playback = self.lock();
        playback.answer += 1;
        std::mem::take(&mut playback.heard)
    }

    fn answer(&self) -> u64 {
        self.lock().answer
    }
}

/// What the caller heard of an interrupted answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    /// Audio the caller heard.
    pub heard: Duration,
    /// Audio sent to the phone before the interruption.
    pub sent: Duration,
    /// The answer's transcript up to where it was heard.
    pub transcript: String,
}

/// The answer going out: its audio so far and its transcript by position.
#[derive(Debug, Default)]
struct Answer {
    /// Audio sent so far (μ-law bytes at 8 kHz).
    sent_bytes: usize,
    /// Transcript fragments, each at the audio position it arrived at.
    transcript: Vec<(Duration, String)>,
    transcript_bytes: usize,
}

impl Answer {
    fn sent(&self) -> Duration {
        Duration::from_millis((self.sent_bytes / BYTES_PER_MS) as u64)
    }

    fn transcript_until(&self, heard: Duration) -> String {
        self.transcript
            .iter()
            .take_while(|(at, _)| *at <= heard)
            .map(|(_, text)| text.as_str())
            .collect()
    }
}

/// Turns model audio into the carrier's `media` messages, reusing its buffers from frame to frame.
struct Encoder {
    carrier: &'static dyn Carrier,
    stream_id: String,
    resampler: Option<Resampler>,
    pcm: Vec<u8>,
    ulaw: Vec<u8>,
}

impl Encoder {
    /// PCM16 at `rate` to μ-law at 8 kHz in `self.ulaw` (empty while the resampler fills a chunk).
    fn encode(&mut self, pcm: &[u8], rate: u32) {
        self.ulaw.clear();
        if rate == PHONE_RATE {
            g711::encode_into(pcm, &mut self.ulaw);
            return;
        }
        if self.resampler.as_ref().is_none_or(|r| r.from() != rate) {
            self.resampler = Resampler::new(rate, PHONE_RATE);
        }
        let Some(resampler) = self.resampler.as_mut() else {
            tracing::warn!(rate, "model audio at an unusable rate; dropped");
            return;
        };
        self.pcm.clear();
        resampler.push_into(pcm, &mut self.pcm);
        g711::encode_into(&self.pcm, &mut self.ulaw);
    }

    /// The resampler's rest at the end of an answer, into `self.ulaw`.
    fn flush(&mut self) {
        self.ulaw.clear();
        if let Some(resampler) = self.resampler.as_mut() {
            self.pcm.clear();
            resampler.flush_into(&mut self.pcm);
            g711::encode_into(&self.pcm, &mut self.ulaw);
        }
    }

    /// An interrupted answer's rest is dropped, not played into the next.
    fn reset(&mut self) {
        if let Some(resampler) = self.resampler.as_mut() {
            resampler.reset();
        }
    }
}

/// The first model audio not yet in a frame sent: when the model produced it (the event's
/// timestamp) and the input that prompted it. A chunk shorter than the resampler's leaves no
/// frame of its own; its frame, sent with the next chunk's, is timed from it.
#[derive(Debug, Default)]
struct Unsent {
    created: Option<f64>,
    prompted_by: Option<std::time::Instant>,
}

impl Unsent {
    fn note(&mut self, created: f64, prompted_by: Option<std::time::Instant>) {
        self.created.get_or_insert(created);
        self.prompted_by = self.prompted_by.or(prompted_by);
    }
}

/// What the output needs besides the run's events.
pub struct OutputParts {
    /// The carrier.
    pub carrier: &'static dyn Carrier,
    /// The stream's id, in every message.
    pub stream_id: String,
    /// Where marks are counted.
    pub playback: SharedPlayback,
    /// Where a backend that cuts interrupted answers reads how much was heard.
    pub playout: Playout,
    /// Where an interrupted answer's heard part goes (to be committed).
    pub heard: mpsc::Sender<Heard>,
    /// Fires when the run has ended.
    pub done: Latch,
    /// Set when the run's last word was an error: it failed.
    pub failed: Arc<AtomicBool>,
    /// Said (μ-law) when the run fails, before the call ends.
    pub goodbye: Option<Bytes>,
}

/// The run's events as writer commands for a phone; fires `done` when the run ends.
pub struct CallOutput {
    events: BoxStream<'static, Event>,
    meter: Option<RunMeter>,
    parts: OutputParts,
    encoder: Encoder,
    answer: Answer,
    unsent: Unsent,
    /// Commands made from one event, not yet taken.
    ready: VecDeque<WriterCommand>,
}

impl CallOutput {
    /// The output of the run `events`, counted by `meter`.
    pub fn new(events: BoxStream<'static, Event>, meter: RunMeter, parts: OutputParts) -> Self {
        let encoder = Encoder {
            carrier: parts.carrier,
            stream_id: parts.stream_id.clone(),
            // Planning the resampler's transforms costs as much as resampling a few frames:
            // done here, it is not between the call's first answer and its first write.
            resampler: Resampler::new(MODEL_OUTPUT_RATE, PHONE_RATE),
            pcm: Vec::with_capacity(2048),
            ulaw: Vec::with_capacity(1024),
        };
        CallOutput {
            events,
            meter: Some(meter),
            parts,
            encoder,
            answer: Answer::default(),
            unsent: Unsent::default(),
            ready: VecDeque::with_capacity(4),
        }
    }

    /// Takes the rest of the run's events without sending them: the caller is gone.
    pub async fn drain(&mut self) {
        while let Some(meter) = &self.meter {
            match self.events.next().await {
                Some(event) => drop(meter.counted(event)),
                None => self.finish(),
            }
        }
    }

    fn finish(&mut self) {
        self.meter = None;
        if self.parts.failed.load(Ordering::Relaxed) {
            self.goodbye();
        }
        self.parts.done.fire();
    }

    /// One event of the run, as what the phone is sent.
    fn take(&mut self, event: Event) {
        let is_recording = event
            .content
            .as_ref()
            .is_some_and(|c| !c.parts.is_empty() && c.parts.iter().all(|p| p.file_data.is_some()));
        if !is_recording {
            let failed = event
                .error_code
                .as_deref()
                .is_some_and(|code| code != RECORDING_DROPPED);
            self.parts.failed.store(failed, Ordering::Relaxed);
        }
        if event.interrupted == Some(true) {
            self.interrupted(&event);
            return;
        }
        let mut prompted_by = None;
        for part in event.content.iter().flat_map(|c| &c.parts) {
            prompted_by = prompted_by.or(part.prompted_by);
            if let Some(blob) = part.inline_data.as_ref().filter(|b| b.is_audio()) {
                let rate = blob.sample_rate().unwrap_or(MODEL_OUTPUT_RATE);
                self.encoder.encode(&blob.data, rate);
                self.unsent.note(event.timestamp, prompted_by.take());
                self.audio();
            }
        }
        if let Some(text) = event
            .output_transcription
            .as_ref()
            .filter(|_| event.is_partial())
            .and_then(|t| t.text.as_deref())
        {
            if self.answer.transcript_bytes + text.len() <= MAX_TRANSCRIPT_BYTES {
                self.answer.transcript_bytes += text.len();
                self.answer
                    .transcript
                    .push((self.answer.sent(), text.to_owned()));
            }
        }
        if event.turn_complete == Some(true) {
            self.encoder.flush();
            self.audio();
            self.unsent = Unsent::default();
            self.parts.playback.next_answer();
            self.answer = Answer::default();
            // Nothing to send, but the writer times the turn's end.
            self.push(EncodedEvent {
                ends_turn: true,
                created: event.timestamp,
                ..silent()
            });
        }
    }

    /// Sends what the encoder holds as one `media` message with its mark, timed from the
    /// oldest model audio in it.
    fn audio(&mut self) {
        let ulaw = &self.encoder.ulaw;
        if ulaw.is_empty() {
            return;
        }
        let Unsent {
            created,
            prompted_by,
        } = std::mem::take(&mut self.unsent);
        if self.answer.sent_bytes == 0 {
            self.parts.playout.answer_started();
        }
        self.answer.sent_bytes += ulaw.len();
        let carrier = self.encoder.carrier;
        let mut json = String::new();
        carrier.media(&self.encoder.stream_id, ulaw, &mut json);
        let mark = format!(
            "{}:{}",
            self.parts.playback.answer(),
            self.answer.sent().as_millis()
        );
        self.push(EncodedEvent {
            json,
            trailer: Some(carrier.mark(&self.encoder.stream_id, &mark)),
            audio: Duration::from_micros((ulaw.len() * 1000 / BYTES_PER_MS) as u64),
            created: created.unwrap_or_else(crate::event::now_timestamp),
            prompted_by,
            ..silent()
        });
    }

    /// The caller spoke over the answer: the phone drops what it holds, and what was heard of
    /// the answer is reported.
    fn interrupted(&mut self, event: &Event) {
        self.encoder.reset();
        self.unsent = Unsent::default();
        let heard = self.parts.playback.next_answer();
        let answer = std::mem::take(&mut self.answer);
        self.push(EncodedEvent {
            json: self.encoder.carrier.clear(&self.encoder.stream_id),
            interrupted: true,
            ends_turn: true,
            created: event.timestamp,
            ..silent()
        });
        if answer.sent_bytes > 0 {
            let report = Heard {
                heard: heard.min(answer.sent()),
                sent: answer.sent(),
                transcript: answer.transcript_until(heard),
            };
            if self.parts.heard.try_send(report).is_err() {
                tracing::debug!("what the caller heard was not reported: the call is closing");
            }
        }
    }

    /// The run failed: the goodbye message, then a mark the call waits for before it ends.
    fn goodbye(&mut self) {
        let Some(clip) = self.parts.goodbye.clone() else {
            return;
        };
        let carrier = self.encoder.carrier;
        let mut json = String::new();
        carrier.media(&self.encoder.stream_id, &clip, &mut json);
        self.push(EncodedEvent {
            json,
            trailer: Some(carrier.mark(&self.encoder.stream_id, GOODBYE_MARK)),
            audio: Duration::from_millis((clip.len() / BYTES_PER_MS) as u64),
            ..silent()
        });
    }

    fn push(&mut self, event: EncodedEvent) {
        self.ready.push_back(WriterCommand::Event(Box::new(event)));
    }
}

/// An encoded event that sends nothing.
fn silent() -> EncodedEvent {
    EncodedEvent {
        binary: None,
        json: String::new(),
        trailer: None,
        audio: Duration::ZERO,
        interrupted: false,
        ends_turn: false,
        answer_text: false,
        created: 0.0,
        prompted_by: None,
    }
}

impl Stream for CallOutput {
    type Item = WriterCommand;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WriterCommand>> {
        let this = &mut *self;
        loop {
            if let Some(command) = this.ready.pop_front() {
                return Poll::Ready(Some(command));
            }
            let Some(meter) = &this.meter else {
                return Poll::Ready(None);
            };
            match ready!(this.events.poll_next_unpin(cx)) {
                Some(event) => {
                    let event = meter.counted(event);
                    this.take(event);
                }
                None => this.finish(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_of_the_current_answer_move_the_heard_position_and_stale_ones_do_not() {
        let playback = SharedPlayback::default();
        assert_eq!(
            playback.acknowledged("0:40"),
            Some(Duration::from_millis(40))
        );
        assert_eq!(playback.acknowledged("0:20"), None, "behind");
        assert_eq!(playback.acknowledged("goodbye"), None);
        assert_eq!(playback.acknowledged("x:1"), None);
        assert_eq!(playback.next_answer(), Duration::from_millis(40));
        // A clear has the phone acknowledge the dropped marks of the last answer: stale.
        assert_eq!(playback.acknowledged("0:400"), None);
        assert_eq!(
            playback.acknowledged("1:20"),
            Some(Duration::from_millis(20))
        );
    }

    /// An answer's audio event: `ms` of 24 kHz PCM16 made at `timestamp`.
    fn audio_event(ms: usize, timestamp: f64, prompted_by: Option<std::time::Instant>) -> Event {
        let mut event = Event::new("e-1", "agent");
        event.timestamp = timestamp;
        event.partial = Some(true);
        let blob = crate::event::Blob::new(Bytes::from(vec![0u8; ms * 48]), "audio/pcm;rate=24000");
        event.content = Some(crate::event::Content {
            parts: vec![crate::event::Part {
                inline_data: Some(blob),
                prompted_by,
                ..Default::default()
            }],
            role: Some("model".into()),
        });
        event
    }

    fn output(events: Vec<Event>) -> CallOutput {
        let carrier = super::super::carrier("twilio").unwrap();
        let (heard, _) = mpsc::channel(1);
        let parts = OutputParts {
            carrier,
            stream_id: "MZ1".into(),
            playback: SharedPlayback::default(),
            playout: Playout::default(),
            heard,
            done: Latch::new(),
            failed: Arc::default(),
            goodbye: None,
        };
        let meter = crate::gateway::telemetry::metrics::Metrics::default()
            .meter()
            .run();
        CallOutput::new(futures::stream::iter(events).boxed(), meter, parts)
    }

    fn media(command: WriterCommand) -> EncodedEvent {
        match command {
            WriterCommand::Event(event) => *event,
            WriterCommand::Close { .. } => panic!("a close"),
        }
    }

    #[tokio::test]
    async fn an_answers_first_frame_goes_out_with_its_first_audio_and_is_timed_from_it() {
        let prompt = std::time::Instant::now();
        let mut output = output(vec![
            audio_event(40, 100.0, Some(prompt)),
            audio_event(40, 100.04, None),
        ]);
        // The first chunk makes a frame of its own, at once: nothing waits for a second chunk
        // or for the resampler to be built.
        assert!(
            output.encoder.resampler.is_some(),
            "built before any answer"
        );
        let first = media(output.next().await.unwrap());
        assert!(first.json.contains("\"event\":\"media\""), "{}", first.json);
        assert_eq!(first.audio, Duration::from_millis(40));
        assert_eq!(first.created, 100.0);
        assert_eq!(first.prompted_by, Some(prompt));
        let second = media(output.next().await.unwrap());
        assert_eq!(second.created, 100.04);
        assert_eq!(second.prompted_by, None);
    }

    #[tokio::test]
    async fn a_chunk_too_short_for_a_frame_times_the_frame_that_carries_it() {
        let prompt = std::time::Instant::now();
        // 10 ms: half the resampler's chunk, so its audio goes out with the next chunk's.
        let mut output = output(vec![
            audio_event(10, 100.0, Some(prompt)),
            audio_event(30, 100.01, None),
        ]);
        let first = media(output.next().await.unwrap());
        assert_eq!(first.audio, Duration::from_millis(40));
        assert_eq!(first.created, 100.0, "timed from the model's first audio");
        assert_eq!(first.prompted_by, Some(prompt), "the answer is still timed");
    }

    #[test]
    fn the_heard_transcript_stops_where_the_caller_stopped_hearing() {
        let answer = Answer {
            sent_bytes: 8 * 900,
            transcript: vec![
                (Duration::ZERO, "It is ".into()),
                (Duration::from_millis(400), "noon in ".into()),
                (Duration::from_millis(800), "Tokyo.".into()),
            ],
            transcript_bytes: 0,
        };
        assert_eq!(
            answer.transcript_until(Duration::from_millis(500)),
            "It is noon in "
        );
        assert_eq!(answer.sent(), Duration::from_millis(900));
    }
}
