//! Real-time pacing of the events the writer holds back, apart from any socket: model audio goes
//! out no earlier than a lead before the client will play it, in batches, and an `interrupted`
//! event drops the held audio it overtakes. Pure (the caller passes the clock), so it is tested
//! alone.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::gateway::ws::codec::EncodedEvent;

/// The encoded events waiting for the socket, in order, and the playback clock of their audio.
#[derive(Debug)]
pub struct Pacer {
    held: VecDeque<EncodedEvent>,
    playback: Playback,
    /// How far audio may run ahead of real-time playback at the client.
    lead: Duration,
    /// How far the lead may fall below `lead` before a wake-up tops it up.
    batch: Duration,
    /// Events held before the writer stops taking more.
    capacity: usize,
    /// Audio events dropped because their answer was interrupted.
    dropped: u64,
}

/// What the writer should do next.
#[derive(Debug, PartialEq)]
pub enum WriterStep {
    /// Write this event now; `audio_at` is the clock it was released at if it carries audio.
    Write {
        /// The event.
        event: EncodedEvent,
        /// When its audio was released (`None`: no audio).
        audio_at: Option<Instant>,
    },
    /// The next event is audio that is not due yet: wake up at this time (meanwhile, take more
    /// commands: an interrupt may come).
    WaitUntil(Instant),
    /// Nothing is held.
    Idle,
}

impl Pacer {
    /// Paces at `lead` ahead of playback, topping it up `batch` at a time (at most half of
    /// `lead`, so a short lead still keeps the client fed), holding up to `capacity` events.
    pub fn new(lead: Duration, batch: Duration, capacity: usize) -> Self {
        Pacer {
            held: VecDeque::new(),
            playback: Playback::default(),
            lead,
            batch: batch.min(lead / 2),
            capacity,
            dropped: 0,
        }
    }

    /// Holds an event behind the others. An `interrupted` one first drops the held audio (of
    /// the answer it interrupts) and restarts the playback clock.
    pub fn push(&mut self, event: EncodedEvent) {
        if event.interrupted {
            let before = self.held.len();
            self.held.retain(|held| !held.is_audio());
            self.dropped += (before - self.held.len()) as u64;
            self.playback = Playback::default();
        }
        self.held.push_back(event);
    }

    /// The next step at `now`. With `paced` false (the run has ended) audio goes out at once.
    pub fn next(&mut self, now: Instant, paced: bool) -> WriterStep {
        let audio = match self.held.front() {
            Some(front) => front.is_audio(),
            None => return WriterStep::Idle,
        };
        if audio {
            let at = self.playback.send_at(now, self.lead);
            if at > now && paced {
                // Wait until a batch is due: the lead has fallen `batch` below its limit.
                return WriterStep::WaitUntil(at + self.batch);
            }
        }
        let Some(event) = self.held.pop_front() else {
            return WriterStep::Idle;
        };
        if audio {
            self.playback.sent(event.audio);
        }
        WriterStep::Write {
            event,
            audio_at: audio.then_some(now),
        }
    }

    /// True when the writer should take no more commands until something goes out.
    pub fn is_full(&self) -> bool {
        self.held.len() >= self.capacity
    }

    /// True if an answer's audio or text is held.
    pub fn holds_answer(&self) -> bool {
        self.held.iter().any(EncodedEvent::is_answer)
    }

    /// Audio events dropped so far because their answer was interrupted.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// The playback clock of one audio stream at the client.
#[derive(Debug, Default)]
struct Playback {
    started: Option<Instant>,
    queued: Duration,
}

impl Playback {
    /// When a chunk may be sent: no earlier than `lead` before the client will need it.
    fn send_at(&mut self, now: Instant, lead: Duration) -> Instant {
        match self.started {
            Some(start) if start + self.queued >= now => {
                (start + self.queued).checked_sub(lead).unwrap_or(now)
            }
            // The client has played everything we sent: start a new stream clock.
            _ => {
                self.started = Some(now);
                self.queued = Duration::ZERO;
                now
            }
        }
    }

    fn sent(&mut self, audio: Duration) {
        self.queued += audio;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAD: Duration = Duration::from_millis(500);
    const BATCH: Duration = Duration::from_millis(100);

    fn event(name: &str, audio_ms: u64, interrupted: bool) -> EncodedEvent {
        EncodedEvent {
            binary: None,
            json: name.into(),
            trailer: None,
            audio: Duration::from_millis(audio_ms),
            interrupted,
            ends_turn: interrupted,
            answer_text: false,
            created: 0.0,
            prompted_by: None,
        }
    }

    /// Steps the pacer on a simulated clock until it is idle: each event's name and the time
    /// after `start` it was released at.
    fn release_all(pacer: &mut Pacer, start: Instant) -> Vec<(String, Duration)> {
        let mut now = start;
        let mut released = Vec::new();
        for _ in 0..10_000 {
            match pacer.next(now, true) {
                WriterStep::Write { event, .. } => released.push((event.json, now - start)),
                WriterStep::WaitUntil(at) => {
                    assert!(at > now, "a wait must move the clock on");
                    now = at;
                }
                WriterStep::Idle => return released,
            }
        }
        panic!("the pacer never went idle");
    }

    #[test]
    fn audio_goes_out_a_lead_ahead_of_playback_in_batches() {
        let mut pacer = Pacer::new(LEAD, BATCH, 1024);
        // Two seconds of answer audio in 40 ms chunks, all at once (a model in burst mode).
        for i in 0..50 {
            pacer.push(event(&format!("a{i}"), 40, false));
        }
        let released = release_all(&mut pacer, Instant::now());
        assert_eq!(released.len(), 50);
        for (i, (name, at)) in released.iter().enumerate() {
            assert_eq!(name, &format!("a{i}"), "in order");
            // Chunk i plays at 40 ms * i: it left at most the lead before that, and at least
            // the lead less a batch before, so the client never ran dry.
            let plays = Duration::from_millis(40 * i as u64);
            assert!(*at + LEAD >= plays, "chunk {i} early: {at:?}");
            assert!(
                plays < LEAD || plays.saturating_sub(*at) >= LEAD - BATCH,
                "chunk {i} late: released {at:?}, plays {plays:?}"
            );
        }
        let mut wakes: Vec<Duration> = released.iter().map(|(_, at)| *at).collect();
        wakes.dedup();
        assert!(wakes.len() <= 2000 / 100 + 1, "{} wake-ups", wakes.len());
    }

    #[test]
    fn interrupted_drops_the_held_audio_but_not_the_other_events() {
        let mut pacer = Pacer::new(LEAD, BATCH, 1024);
        let start = Instant::now();
        for i in 0..10 {
            pacer.push(event(&format!("a{i}"), 1000, false));
        }
        pacer.push(event("transcript", 0, false));
        // The first chunk goes at once, the second waits for playback.
        assert!(matches!(pacer.next(start, true), WriterStep::Write { .. }));
        assert!(matches!(pacer.next(start, true), WriterStep::WaitUntil(_)));
        pacer.push(event("interrupted", 0, true));
        assert_eq!(pacer.dropped(), 9);
        let released: Vec<String> = release_all(&mut pacer, start)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(released, ["transcript", "interrupted"]);
        // The next answer's audio starts a new clock: it is not held behind the dropped audio.
        pacer.push(event("b0", 1000, false));
        assert!(matches!(
            pacer.next(start, true),
            WriterStep::Write { audio_at: Some(at), .. } if at == start
        ));
    }

    #[test]
    fn events_without_audio_keep_their_place_and_are_not_paced() {
        let mut pacer = Pacer::new(LEAD, BATCH, 1024);
        let start = Instant::now();
        pacer.push(event("text", 0, false));
        for name in ["a0", "a1", "a2"] {
            pacer.push(event(name, 1000, false));
        }
        pacer.push(event("done", 0, false));
        let released = release_all(&mut pacer, start);
        let names: Vec<&str> = released.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["text", "a0", "a1", "a2", "done"]);
        // `done` waits only for the audio ahead of it, not for a lead of its own.
        assert_eq!(released[4].1, released[3].1);
        assert!(matches!(
            Pacer::new(LEAD, BATCH, 1).next(start, true),
            WriterStep::Idle
        ));
    }

    #[test]
    fn unpaced_audio_goes_out_at_once() {
        let mut pacer = Pacer::new(LEAD, BATCH, 1024);
        let start = Instant::now();
        for i in 0..10 {
            pacer.push(event(&format!("a{i}"), 1000, false));
        }
        for _ in 0..10 {
            assert!(matches!(
                pacer.next(start, false),
                WriterStep::Write { audio_at: Some(at), .. } if at == start
            ));
        }
        assert_eq!(pacer.next(start, false), WriterStep::Idle);
    }

    #[test]
    fn a_new_stream_starts_once_the_client_has_played_everything() {
        let mut pacer = Pacer::new(LEAD, BATCH, 1024);
        let start = Instant::now();
        pacer.push(event("a0", 1000, false));
        pacer.push(event("a1", 1000, false));
        assert!(matches!(pacer.next(start, true), WriterStep::Write { .. }));
        assert!(matches!(pacer.next(start, true), WriterStep::WaitUntil(_)));
        // Long after both seconds have played, the held chunk goes at once and restarts the clock.
        let later = start + Duration::from_secs(5);
        assert!(matches!(pacer.next(later, true), WriterStep::Write { .. }));
        pacer.push(event("a2", 1000, false));
        assert!(matches!(pacer.next(later, true), WriterStep::WaitUntil(_)));
    }

    #[test]
    fn it_is_full_at_its_capacity_and_knows_when_it_holds_an_answer() {
        let mut pacer = Pacer::new(LEAD, BATCH, 2);
        pacer.push(event("transcript", 0, false));
        assert!(!pacer.is_full());
        assert!(!pacer.holds_answer());
        pacer.push(event("a0", 40, false));
        assert!(pacer.is_full());
        assert!(pacer.holds_answer());
    }
}
