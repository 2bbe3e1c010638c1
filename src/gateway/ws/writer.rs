//! The writer task: the only owner of a socket's sink. It writes what the [`Pacer`] releases
//! (model audio at real time plus a small lead, held audio of an interrupted answer dropped before
//! `interrupted`), times answers as they go out, and gives up on a client that stops reading.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message};
use bytes::Bytes;
use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use tokio::sync::oneshot;
use tokio::time::{timeout, Instant};

use crate::gateway::telemetry::metrics::Meter;
use crate::gateway::ws::close;
use crate::gateway::ws::codec::EncodedEvent;
use crate::gateway::ws::pacing::{Pacer, WriterStep};

/// Bytes of outgoing frames the socket gathers before a write (its WebSocket write buffer);
/// a bigger frame is written at once.
pub const SOCKET_WRITE_BUFFER: usize = 8192;

/// Bytes read from a client socket at a time (larger messages still arrive whole). Beside the
/// write buffer so that every socket route (the browser's and the carriers') sizes its socket
/// from one place.
pub(crate) const SOCKET_READ_BUFFER: usize = 2048;

/// What the connection asks the writer to do.
#[derive(Debug)]
pub enum WriterCommand {
    /// Send an event. (Boxed: a channel allocates room for 32 commands up front, and every
    /// connection has one.)
    Event(Box<EncodedEvent>),
    /// Send a close frame and stop.
    Close {
        /// WebSocket close code.
        code: u16,
        /// Close reason.
        reason: String,
    },
}

/// Writer settings.
#[derive(Debug, Clone, Copy)]
pub struct WriterConfig {
    /// How far audio may run ahead of real-time playback at the client.
    pub audio_lead: Duration,
    /// How much audio a paced wake-up sends at once: the lead is topped up when it has fallen
    /// this far below `audio_lead` (at most half of it), not chunk by chunk.
    pub audio_batch: Duration,
    /// How long one send may block before the client counts as stalled (the slow-client
    /// timeout); a stalled client's close frame waits as long again to go out.
    pub send_timeout: Duration,
    /// Frames the writer holds back while pacing before it stops taking more.
    pub max_pending: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            audio_lead: Duration::from_millis(500),
            audio_batch: Duration::from_millis(100),
            send_timeout: Duration::from_secs(10),
            max_pending: 1024,
        }
    }
}

/// How the writer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriterExit {
    /// Closed on request (or the connection dropped its sender).
    Closed,
    /// The socket failed.
    ClientGone(String),
    /// The client stopped reading for longer than the send timeout.
    Stalled(String),
}

/// Counts of what the writer did, for metrics and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Audio frames dropped because their answer was interrupted.
    pub dropped_interrupted_audio: u64,
}

/// An immediate stop: drop whatever is pending and end the socket this way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Abort {
    /// The socket is gone: write nothing more.
    Silent,
    /// The client sent a close frame: flush the echo the socket queued when it read it, so the
    /// client sees its own code (RFC 6455 closing handshake), not an abnormal 1006.
    Echo,
    /// Send this close frame.
    Close {
        /// WebSocket close code (see [`crate::gateway::ws::close`]).
        code: u16,
        /// Close reason.
        reason: String,
    },
}

/// Runs the writer until closed, aborted, or the client is gone.
///
/// `commands` ends when nothing more will come. `Close` commands are ordered after the frames
/// before them; `abort` is not: it cuts the queue (a taken-over, shut-down or vanished client does
/// not need the rest of the answer). What it sends is counted in `meter`. A stalled client gets
/// no close frame from here: the caller stops the connection first, then sends it with
/// [`close_stalled`], which may wait as long as the client takes to read again.
pub async fn run_writer<S, C>(
    mut sink: S,
    commands: C,
    config: WriterConfig,
    mut abort: oneshot::Receiver<Abort>,
    meter: Meter,
) -> (WriterExit, WriterStats)
where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
    C: Stream<Item = WriterCommand> + Unpin,
{
    let mut pacer = Pacer::new(config.audio_lead, config.audio_batch, config.max_pending);
    let exit = tokio::select! {
        biased;
        close = &mut abort => {
            match close {
                Ok(Abort::Close { code, reason }) => send_close(&mut sink, code, reason).await,
                Ok(Abort::Echo) => {
                    let _ = timeout(CLOSE_TIMEOUT, sink.flush()).await;
                }
                Ok(Abort::Silent) | Err(_) => {}
            }
            WriterExit::Closed
        }
        exit = write_loop(&mut sink, commands, config, &mut pacer, &meter) => exit,
    };
    if let WriterExit::Stalled(_) = &exit {
        meter.stalled();
    }
    let stats = WriterStats {
        dropped_interrupted_audio: pacer.dropped(),
    };
    (exit, stats)
}

/// Closes a stalled client's socket with 1008 and `reason`: the close frame goes behind what the
/// socket still holds, so it waits up to `linger` for the client to read again (a client that
/// never does is dropped after it).
pub async fn close_stalled<S>(sink: &mut S, reason: String, linger: Duration)
where
    S: Sink<Message> + Unpin,
{
    let frame = Message::Close(Some(CloseFrame {
        code: close::POLICY,
        reason: reason.into(),
    }));
    let _ = timeout(linger, sink.send(frame)).await;
}

/// Writes until closed or the client is gone: the pacer says what goes out when, this writes it.
async fn write_loop<S, C>(
    sink: &mut S,
    commands: C,
    config: WriterConfig,
    pacer: &mut Pacer,
    meter: &Meter,
) -> WriterExit
where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
    C: Stream<Item = WriterCommand> + Unpin,
{
    let mut socket = SocketWriter {
        sink,
        limit: config.send_timeout,
        meter,
        unflushed: false,
        last_answer: None,
    };
    let mut inbox = Inbox {
        commands,
        open: true,
        close: None,
    };
    match write_until_closed(&mut socket, &mut inbox, pacer).await {
        Ok(()) => WriterExit::Closed,
        Err(exit) => exit,
    }
}

async fn write_until_closed<S, C>(
    socket: &mut SocketWriter<'_, S>,
    inbox: &mut Inbox<C>,
    pacer: &mut Pacer,
) -> Result<(), WriterExit>
where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
    C: Stream<Item = WriterCommand> + Unpin,
{
    loop {
        inbox.take_ready(pacer, socket.answer_started());
        // Once the run has ended (a close is pending) the rest goes out unpaced, so the close
        // does not wait for playback.
        match pacer.next(Instant::now(), inbox.close.is_none()) {
            WriterStep::Write { event, audio_at } => socket.write(event, audio_at).await?,
            WriterStep::WaitUntil(at) => {
                socket.flush().await?;
                inbox.take_until(at, pacer).await;
            }
            WriterStep::Idle => {
                socket.flush().await?;
                if let Some((code, reason)) = inbox.close.take() {
                    send_close(socket.sink, code, reason).await;
                    return Ok(());
                }
                if !inbox.open {
                    return Ok(());
                }
                inbox.take_next(pacer).await;
            }
        }
    }
}

/// The connection's commands as the writer takes them: events go to the pacer, a close waits
/// until everything before it is out.
struct Inbox<C> {
    commands: C,
    /// False once `commands` has ended.
    open: bool,
    close: Option<(u16, String)>,
}

impl<C> Inbox<C>
where
    C: Stream<Item = WriterCommand> + Unpin,
{
    fn accept(&mut self, command: Option<WriterCommand>, pacer: &mut Pacer) {
        match command {
            Some(WriterCommand::Event(event)) => pacer.push(*event),
            Some(WriterCommand::Close { code, reason }) => self.close = Some((code, reason)),
            None => self.open = false,
        }
    }

    /// Takes what is queued, so an `interrupted` can drop the audio it overtakes; but not past
    /// an answer's first audio or text, which the listener is waiting for: what is ready behind
    /// it can be the rest of the answer, and taking that first runs its whole way through the
    /// flow and the codec before the first byte goes out.
    fn take_ready(&mut self, pacer: &mut Pacer, answer_started: bool) {
        while self.open
            && self.close.is_none()
            && !pacer.is_full()
            && (answer_started || !pacer.holds_answer())
        {
            // Polled without a waker: whenever the writer waits, it awaits `commands` again.
            match self.commands.next().now_or_never() {
                Some(command) => self.accept(command, pacer),
                None => break,
            }
        }
    }

    /// Waits for the next command.
    async fn take_next(&mut self, pacer: &mut Pacer) {
        let command = self.commands.next().await;
        self.accept(command, pacer);
    }

    /// Waits until `at`, taking a command if one comes first (an interrupt may).
    async fn take_until(&mut self, at: Instant, pacer: &mut Pacer) {
        let listen = self.open && !pacer.is_full();
        let command = tokio::select! {
            _ = tokio::time::sleep_until(at) => return,
            command = self.commands.next(), if listen => command,
        };
        self.accept(command, pacer);
    }
}

/// The socket side of the writer: feeds each event's frames to the sink, flushes before the
/// writer waits, and times answers as they go out.
struct SocketWriter<'a, S> {
    sink: &'a mut S,
    /// How long one write may take before the client counts as stalled.
    limit: Duration,
    meter: &'a Meter,
    /// Frames fed to the sink but not yet flushed: everything ready goes out in one write, and
    /// the sink is flushed before the writer waits.
    unflushed: bool,
    /// When the current answer's latest audio or text went out; `None` until an answer's first
    /// audio or text, and again once its turn completes or is interrupted. The turn's end is
    /// timed from it.
    last_answer: Option<Instant>,
}

impl<S> SocketWriter<'_, S>
where
    S: Sink<Message> + Unpin,
    S::Error: std::fmt::Display,
{
    /// True once the current answer's first audio or text is out.
    fn answer_started(&self) -> bool {
        self.last_answer.is_some()
    }

    /// Writes one event (its audio, then its JSON) and counts it: an answer's first audio or
    /// text is flushed at once and timed, and so is the end of its turn.
    async fn write(
        &mut self,
        event: EncodedEvent,
        audio_at: Option<Instant>,
    ) -> Result<(), WriterExit> {
        let (ends_turn, created, prompted_by) = (event.ends_turn, event.created, event.prompted_by);
        // Text is not paced, so only an answer's text reads the clock here.
        let answer_at = audio_at.or_else(|| event.answer_text.then(Instant::now));
        let text = event.json.len() + event.trailer.as_ref().map_or(0, String::len);
        let sizes = (event.binary.as_ref().map(Bytes::len), text);
        self.feed(event).await?;
        if let Some(at) = answer_at {
            if self.last_answer.is_none() {
                // The first audio or text of an answer goes out now, not with what comes next.
                self.flush().await?;
                // How long the gateway took to bring an answer's first audio or text from the
                // model is what a listener waits for beyond the model (later audio is held back
                // for pacing on purpose).
                self.meter.answer_forwarded(created);
            }
            self.last_answer = Some(at);
        }
        if let Some(received) = prompted_by {
            self.meter
                .first_answer(audio_at.is_some(), received.elapsed());
        }
        if ends_turn {
            if let Some(written) = self.last_answer.take() {
                self.meter.turn_end(written.elapsed());
            }
        }
        if let Some(pcm) = sizes.0 {
            self.meter.sent(true, pcm);
        }
        if sizes.1 > 0 {
            self.meter.sent(false, sizes.1);
        }
        Ok(())
    }

    /// Feeds an event's binary audio frame, if any, and its JSON text frame.
    async fn feed(&mut self, event: EncodedEvent) -> Result<(), WriterExit> {
        // An audio frame bigger than the write buffer goes out alone: tungstenite keeps its
        // write buffer's capacity for good, and one that had held such a frame together with
        // events stayed at twice the frame. The frame is written at once anyway, so this costs
        // a write only when events were waiting.
        let alone = event
            .binary
            .as_ref()
            .is_some_and(|pcm| pcm.len() > SOCKET_WRITE_BUFFER);
        if alone {
            self.flush().await?;
        }
        let sink = &mut *self.sink;
        let fed = async {
            if let Some(pcm) = event.binary {
                sink.feed(Message::Binary(pcm)).await?;
                if alone {
                    sink.flush().await?;
                }
            }
            if !event.json.is_empty() {
                sink.feed(Message::Text(event.json.into())).await?;
            }
            match event.trailer {
                Some(trailer) => sink.feed(Message::Text(trailer.into())).await,
                None => Ok(()),
            }
        };
        within(self.limit, fed).await?;
        self.unflushed = true;
        Ok(())
    }

    /// Flushes what was fed to the sink, if anything was; the writer does so before it waits.
    async fn flush(&mut self) -> Result<(), WriterExit> {
        if std::mem::take(&mut self.unflushed) {
            within(self.limit, self.sink.flush()).await?;
        }
        Ok(())
    }
}

/// Runs a sink operation; a failure means the client is gone, and taking longer than `limit`
/// means it stopped reading.
async fn within<E: std::fmt::Display>(
    limit: Duration,
    operation: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), WriterExit> {
    match timeout(limit, operation).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(WriterExit::ClientGone(error.to_string())),
        Err(_) => Err(WriterExit::Stalled(format!(
            "client stopped reading for {limit:?}"
        ))),
    }
}

/// How long a close frame may take to go out to a client that reads.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Sends a close frame, best effort: a client that is not reading may never get it.
async fn send_close<S>(sink: &mut S, code: u16, reason: String)
where
    S: Sink<Message> + Unpin,
{
    let frame = Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }));
    let _ = timeout(CLOSE_TIMEOUT, sink.send(frame)).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::channel::mpsc as fmpsc;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;

    fn frame(json: &str, audio_ms: u64, interrupted: bool) -> Box<EncodedEvent> {
        Box::new(EncodedEvent {
            binary: None,
            json: json.into(),
            trailer: None,
            audio: Duration::from_millis(audio_ms),
            interrupted,
            ends_turn: interrupted,
            answer_text: false,
            created: 0.0,
            prompted_by: None,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn interrupted_drops_queued_audio_of_the_answer() {
        let (sink, mut out) = fmpsc::unbounded::<Message>();
        let (tx, rx) = mpsc::channel(64);
        // Ten seconds of audio at once: pacing holds most of it back.
        for i in 0..10 {
            tx.send(WriterCommand::Event(frame(&format!("a{i}"), 1000, false)))
                .await
                .unwrap();
        }
        let (_abort_tx, abort) = oneshot::channel();
        let writer = tokio::spawn(run_default(sink, rx, abort));
        // The first chunk goes out at once.
        let first = out.next().await.unwrap();
        assert_eq!(first, Message::Text("a0".into()));
        tx.send(WriterCommand::Event(frame("int", 0, true)))
            .await
            .unwrap();
        tx.send(WriterCommand::Close {
            code: 1000,
            reason: "bye".into(),
        })
        .await
        .unwrap();
        let (exit, stats) = writer.await.unwrap();
        assert_eq!(exit, WriterExit::Closed);
        let rest: Vec<Message> = out.collect().await;
        assert_eq!(
            rest[0],
            Message::Text("int".into()),
            "no audio after interrupted"
        );
        assert!(matches!(rest[1], Message::Close(_)));
        assert!(stats.dropped_interrupted_audio >= 8);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_is_given_up_on() {
        // A sink that never accepts anything.
        let sink = futures::sink::unfold((), |_, _m: Message| {
            futures::future::pending::<Result<(), String>>()
        });
        let (tx, rx) = mpsc::channel(4);
        tx.send(WriterCommand::Event(frame("x", 0, false)))
            .await
            .unwrap();
        let (_abort_tx, abort) = oneshot::channel();
        let (exit, _) = run_writer(
            Box::pin(sink),
            ReceiverStream::new(rx),
            WriterConfig::default(),
            abort,
            Meter::default(),
        )
        .await;
        assert!(matches!(exit, WriterExit::Stalled(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn abort_cuts_paced_audio_and_sends_the_close_at_once() {
        let (sink, mut out) = fmpsc::unbounded::<Message>();
        let (tx, rx) = mpsc::channel(64);
        for i in 0..30 {
            tx.send(WriterCommand::Event(frame(&format!("a{i}"), 1000, false)))
                .await
                .unwrap();
        }
        let (abort_tx, abort) = oneshot::channel();
        let writer = tokio::spawn(run_default(sink, rx, abort));
        assert_eq!(out.next().await.unwrap(), Message::Text("a0".into()));
        abort_tx
            .send(Abort::Close {
                code: close::TAKEN_OVER,
                reason: "taken over".into(),
            })
            .unwrap();
        let (exit, _) = writer.await.unwrap();
        assert_eq!(exit, WriterExit::Closed);
        let rest: Vec<Message> = out.collect().await;
        assert!(
            matches!(&rest[..], [Message::Close(Some(f))] if f.code == 4000),
            "{rest:?}"
        );
    }

    #[tokio::test]
    async fn the_first_audio_or_text_and_the_end_of_each_answer_are_timed() {
        let metrics = crate::gateway::telemetry::metrics::Metrics::default();
        let (sink, out) = fmpsc::unbounded::<Message>();
        let (tx, rx) = mpsc::channel(64);
        let turn_complete = Box::new(EncodedEvent {
            ends_turn: true,
            ..*frame("done", 0, false)
        });
        // Three answers of two chunks each, one in text and two in audio: only the first chunk
        // of each is timed, and from the client's audio only where the model said which audio
        // it answers. A turn with no answer first: it has nothing for its end to be timed from.
        let prompted = |frame: Box<EncodedEvent>| {
            Box::new(EncodedEvent {
                prompted_by: Some(std::time::Instant::now()),
                ..*frame
            })
        };
        let text = |json: &str| {
            Box::new(EncodedEvent {
                answer_text: true,
                ..*frame(json, 0, false)
            })
        };
        for command in [
            turn_complete.clone(),
            prompted(text("t1")),
            text("t2"),
            turn_complete.clone(),
            prompted(frame("a1", 20, false)),
            frame("a2", 20, false),
            turn_complete.clone(),
            frame("b1", 20, false),
            frame("b2", 20, false),
            turn_complete,
        ] {
            tx.send(WriterCommand::Event(command)).await.unwrap();
        }
        drop(tx);
        let (_abort_tx, abort) = oneshot::channel();
        let (exit, _) = run_writer(
            sink,
            ReceiverStream::new(rx),
            WriterConfig::default(),
            abort,
            metrics.meter(),
        )
        .await;
        assert_eq!(exit, WriterExit::Closed);
        assert_eq!(out.count().await, 10);
        let text = metrics.render();
        assert!(
            text.lines()
                .any(|l| l == "livegate_answer_forward_latency_seconds_count 3"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "livegate_first_audio_latency_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == "livegate_first_text_latency_seconds_count 1"),
            "{text}"
        );
        // Each answer's end is timed once, from its last audio or text.
        assert!(
            text.lines()
                .any(|l| l == "livegate_turn_end_seconds_count 3"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == r#"livegate_frames_total{direction="out",kind="text"} 10"#),
            "{text}"
        );
    }

    /// 40 ms of binary audio, `bytes` long, with its event `json`.
    fn audio(json: &str, bytes: usize) -> WriterCommand {
        let mut f = frame(json, 40, false);
        f.binary = Some(Bytes::from(vec![0; bytes]));
        WriterCommand::Event(f)
    }

    /// A writer with the default settings, counting into metrics nobody reads.
    fn run_default<S>(
        sink: S,
        rx: mpsc::Receiver<WriterCommand>,
        abort: oneshot::Receiver<Abort>,
    ) -> impl std::future::Future<Output = (WriterExit, WriterStats)>
    where
        S: Sink<Message> + Unpin,
        S::Error: std::fmt::Display,
    {
        run_writer(
            sink,
            ReceiverStream::new(rx),
            WriterConfig::default(),
            abort,
            Meter::default(),
        )
    }

    /// A sink that logs what it is given and each flush (in a log others may write to too).
    #[derive(Default, Clone)]
    struct LogSink(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl LogSink {
        fn push(&self, entry: String) {
            self.0.lock().unwrap().push(entry);
        }

        fn entries(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Sink<Message> for LogSink {
        type Error = String;

        fn poll_ready(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), String>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn start_send(self: std::pin::Pin<&mut Self>, item: Message) -> Result<(), String> {
            let entry = match item {
                Message::Binary(pcm) => format!("binary {}", pcm.len()),
                Message::Text(text) => format!("text {}", text.as_str()),
                other => format!("{other:?}"),
            };
            self.push(entry);
            Ok(())
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), String>> {
            self.push("flush".into());
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), String>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_audio_frame_bigger_than_the_write_buffer_goes_out_alone() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(WriterCommand::Event(frame("t", 0, false)))
            .await
            .unwrap();
        tx.send(audio("big", SOCKET_WRITE_BUFFER + 1))
            .await
            .unwrap();
        tx.send(audio("small", 1920)).await.unwrap();
        drop(tx);
        let (_abort_tx, abort) = oneshot::channel();
        let sink = LogSink::default();
        let (exit, _) = run_default(sink.clone(), rx, abort).await;
        assert_eq!(exit, WriterExit::Closed);
        let big = format!("binary {}", SOCKET_WRITE_BUFFER + 1);
        assert_eq!(
            sink.entries(),
            [
                "text t",
                "flush",
                &big,
                "flush",
                "text big",
                // The answer's first audio is written at once.
                "flush",
                "binary 1920",
                "text small",
                "flush"
            ],
            "the events before the big frame are written first, the small frame is gathered"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answers_first_audio_is_written_before_the_rest_is_taken() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(WriterCommand::Event(frame("transcript", 0, false)))
            .await
            .unwrap();
        for json in ["a1", "a2", "a3"] {
            tx.send(audio(json, 1920)).await.unwrap();
        }
        drop(tx);
        // One log for what the writer takes and what it writes.
        let sink = LogSink::default();
        let taken = sink.clone();
        let commands = ReceiverStream::new(rx).inspect(move |command| {
            if let WriterCommand::Event(frame) = command {
                taken.push(format!("take {}", frame.json));
            }
        });
        let (_abort_tx, abort) = oneshot::channel();
        let config = WriterConfig::default();
        let (exit, _) = run_writer(sink.clone(), commands, config, abort, Meter::default()).await;
        assert_eq!(exit, WriterExit::Closed);
        assert_eq!(
            sink.entries()[..8],
            [
                "take transcript",
                "take a1",
                "text transcript",
                "binary 1920",
                "text a1",
                "flush",
                "take a2",
                "take a3",
            ],
            "the rest of the answer is taken once its first audio is out: {:?}",
            sink.entries()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn paced_audio_goes_out_in_batches_and_keeps_the_client_fed() {
        let (sink, mut out) = fmpsc::unbounded::<Message>();
        let (tx, rx) = mpsc::channel(64);
        // Two seconds of answer audio in 40 ms chunks, all at once (a model in burst mode).
        for i in 0..50 {
            tx.send(WriterCommand::Event(frame(&format!("a{i}"), 40, false)))
                .await
                .unwrap();
        }
        drop(tx);
        let (_abort_tx, abort) = oneshot::channel();
        let config = WriterConfig::default();
        let start = Instant::now();
        let writer = tokio::spawn(run_writer(
            sink,
            ReceiverStream::new(rx),
            config,
            abort,
            Meter::default(),
        ));
        let mut sent_at = Vec::new();
        while let Some(message) = out.next().await {
            assert_eq!(message, Message::Text(format!("a{}", sent_at.len()).into()));
            sent_at.push(Instant::now() - start);
        }
        assert_eq!(writer.await.unwrap().0, WriterExit::Closed);
        assert_eq!(sent_at.len(), 50);
        for (i, at) in sent_at.iter().enumerate() {
            // Chunk i starts playing at 40 ms * i: it left at most `audio_lead` before that, and
            // at least `audio_lead - audio_batch` before, so the client never ran dry.
            let plays = Duration::from_millis(40 * i as u64);
            let lead = plays.saturating_sub(*at);
            assert!(*at + config.audio_lead >= plays, "chunk {i} early: {at:?}");
            assert!(
                plays < config.audio_lead || lead >= config.audio_lead - config.audio_batch,
                "chunk {i} late: sent {at:?}, plays {plays:?}"
            );
        }
        let mut wakes = sent_at.clone();
        wakes.dedup();
        assert!(
            wakes.len() <= 2000 / 100 + 1,
            "{} wake-ups for 50 chunks",
            wakes.len()
        );
    }
}
