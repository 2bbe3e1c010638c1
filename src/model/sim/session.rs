//! One sim connection: a single task that reads inputs, detects speech, and sends paced answers.
//!
//! The task never blocks on one side while the other waits: a `select!` reads inputs, sleeps until
//! the next message is due, and sends it only when the flow has room (`reserve`). So speech that
//! arrives while an answer is being paced, or while the flow is slow to read, still barges in.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::answer::{Answer, AnswerStyle, PromptTokens};
use super::pcm::{whole_samples, Track};
use super::replies::{
    audio_tokens, notice_reply, plan_reply, running_answer, speech_transcript, text_tokens,
    tool_answer, Heard, Reply,
};
use super::vad::{Vad, VadEvent, VadSettings};
use super::voice::{voice_pitch, Echo, Voice, OUTPUT_RATE};
use super::{Pacing, SimConfig};
use crate::event::{
    Blob, FunctionCall, FunctionResponse, Scheduling, SessionResumptionUpdate, Transcription,
};
use crate::latch::receiver_gone;
use crate::lock::Recover;
use crate::model::{
    EndSensitivity, LiveConnectConfig, LiveInput, LlmResponse, Modality, ModelMessage,
    StartSensitivity,
};

/// Sample rate assumed for PCM whose mime type names none (or an unusable one).
const DEFAULT_INPUT_RATE: u32 = 16_000;

/// Runs a sim connection until the flow drops its sender or its receiver.
pub(super) async fn run(
    sim: SimConfig,
    config: LiveConnectConfig,
    mut inputs: crate::model::InputReceiver,
    output: mpsc::Sender<ModelMessage>,
) {
    let mut session = Session::new(sim, config);
    tracing::debug!(
        modality = ?session.config.modality(),
        manual_activity = session.manual,
        pacing = ?sim.pacing,
        "sim session opened"
    );
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    let mut armed: Option<Instant> = None;
    // Made once, not per input, and not `Sender::closed`: polled at every input, that takes the
    // channel's waiter-list lock each time, on every session's every frame.
    let flow_gone = receiver_gone(&output);
    tokio::pin!(flow_gone);
    loop {
        let due = session.next_due();
        if let Some(at) = due {
            if armed != Some(at) {
                sleep.as_mut().reset(at);
                armed = Some(at);
            }
        }
        let ready = due.is_some_and(|at| at <= Instant::now());
        tokio::select! {
            // Inputs first: speech must be able to cut an answer before its next chunk goes out.
            biased;
            input = inputs.recv() => match input {
                Some(input) => session.handle(input),
                None => {
                    tracing::debug!("sim session closed by the flow");
                    break;
                }
            },
            permit = output.reserve(), if ready => match permit {
                Ok(permit) => {
                    if let Some(message) = session.next_message() {
                        permit.send(Ok(Box::new(message)));
                    }
                }
                Err(_) => break,
            },
            () = &mut sleep, if due.is_some() && !ready => {}
            () = &mut flow_gone, if !ready => {
                tracing::debug!("sim session dropped by the flow");
                break;
            }
        }
    }
}

/// What a realtime input's mime type says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MediaKind {
    /// Raw PCM at this rate (the default when it names none, or an unusable one).
    Pcm(u32),
    /// Anything else, which the sim ignores.
    Other,
}

impl MediaKind {
    fn of(blob: &Blob) -> Self {
        if !blob.is_pcm() {
            return MediaKind::Other;
        }
        MediaKind::Pcm(
            blob.sample_rate()
                .filter(|r| (1_000..=384_000).contains(r))
                .unwrap_or(DEFAULT_INPUT_RATE),
        )
    }
}

/// The state of one simulated live session.
struct Session {
    sim: SimConfig,
    config: LiveConnectConfig,
    /// Activity is signalled by the client (automatic detection disabled).
    manual: bool,
    /// User activity interrupts answers (`START_OF_ACTIVITY_INTERRUPTS`, the default).
    activity_interrupts: bool,
    rate: u32,
    /// The last realtime input's mime type and what it says (PCM or not, its rate): a client
    /// sends the same one with every frame, so it is parsed when it changes, not per frame.
    media_kind: (String, MediaKind),
    track: Track,
    vad: Vad,
    vad_events: Vec<VadEvent>,
    /// While a client audio chunk is heard: when livegate received it. An utterance it ends is
    /// answered with it on the first audio, for the first-audio latency metric.
    hearing: Option<std::time::Instant>,
    /// Manual mode: the first sample of the activity in progress.
    activity_start: Option<u64>,
    /// Text of content turns sent without `turn_complete`, for the next turn.
    pending_text: Vec<String>,
    /// Tokens of the conversation so far (each turn's prompt re-reads it, as Gemini's does).
    context: PromptTokens,
    /// Messages due at once, ahead of any answer (input transcriptions, `interrupted`, handles).
    immediate: VecDeque<(Instant, LlmResponse)>,
    /// Answers to give, the first one in progress (several only with `NO_INTERRUPTION`).
    answers: VecDeque<Answer>,
    resumption: Option<Resumption>,
    ignored_media: u64,
    /// Tool calls sent and not yet answered, with the text that asked for them.
    awaiting: Option<AwaitingTools>,
    /// Non-blocking calls running while the sim goes on, with the text that asked for each.
    background: VecDeque<(FunctionCall, String)>,
}

/// Most non-blocking calls the sim keeps waiting for; the oldest are forgotten first.
const MAX_BACKGROUND_CALLS: usize = 64;

/// A turn waiting for its tool responses.
struct AwaitingTools {
    asked: String,
    calls: Vec<FunctionCall>,
    responses: Vec<FunctionResponse>,
    prompt: PromptTokens,
}

/// How long the sim remembers the context a handle resumes (Gemini keeps it two hours).
const HANDLE_LIFETIME: Duration = Duration::from_secs(2 * 60 * 60);
/// Most model sessions the sim remembers at once; the oldest are forgotten first.
const MAX_REMEMBERED_HANDLES: usize = 10_000;

/// What the sim remembers of its sessions, as Gemini does on its servers: per model session
/// (the `{id}` of its `sim-{id}-{n}` handles) the last handle's number and the context it
/// resumes. Process-wide, so a handle is good on any later connection to this process, and so
/// for every gateway node that shares one `mock-gemini`. One entry per model session, not per
/// handle, so the map grows with sessions rather than turns.
static REMEMBERED: std::sync::LazyLock<std::sync::Mutex<HashMap<String, Remembered>>> =
    std::sync::LazyLock::new(Default::default);

#[derive(Debug, Clone, Copy)]
struct Remembered {
    count: u64,
    context: PromptTokens,
    at: Instant,
}

fn remembered() -> std::sync::MutexGuard<'static, HashMap<String, Remembered>> {
    REMEMBERED.lock_or_recover()
}

/// `sim-{id}-{n}` → (id, n).
fn parse_handle(handle: &str) -> Option<(&str, u64)> {
    let (id, count) = handle.strip_prefix("sim-")?.rsplit_once('-')?;
    Some((id, count.parse().ok()?))
}

/// Remembers the context `handle` resumes.
fn remember(handle: &str, context: PromptTokens) {
    let Some((id, count)) = parse_handle(handle) else {
        return;
    };
    let mut sessions = remembered();
    let now = Instant::now();
    if sessions.len() >= MAX_REMEMBERED_HANDLES && !sessions.contains_key(id) {
        sessions.retain(|_, r| now.duration_since(r.at) < HANDLE_LIFETIME);
        if sessions.len() >= MAX_REMEMBERED_HANDLES {
            // Forget the oldest tenth at once, so a full map is swept rarely.
            let mut ages: Vec<Instant> = sessions.values().map(|r| r.at).collect();
            ages.sort_unstable();
            let cutoff = ages[ages.len() / 10];
            sessions.retain(|_, r| r.at > cutoff);
        }
    }
    sessions.insert(
        id.to_owned(),
        Remembered {
            count,
            context,
            at: now,
        },
    );
}

/// The context a handle resumes, if the sim issued it and still remembers its session (an
/// older handle of the session resumes its latest context).
fn recall(handle: &str) -> Option<PromptTokens> {
    let (id, count) = parse_handle(handle)?;
    remembered()
        .get(id)
        .filter(|r| count <= r.count && r.at.elapsed() < HANDLE_LIFETIME)
        .map(|r| r.context)
}

/// True if a connection may resume with this handle: the sim issued it, in this process, and
/// still remembers its context.
pub fn knows_handle(handle: &str) -> bool {
    recall(handle).is_some()
}

/// Session resumption handles: `sim-{id}-{n}`.
struct Resumption {
    id: String,
    count: u64,
}

impl Resumption {
    /// Continues the numbering of a handle this sim issued, or starts a new one.
    fn new(handle: Option<&str>) -> Self {
        let resumed = handle.and_then(|h| {
            let rest = h.strip_prefix("sim-")?;
            let (id, count) = rest.rsplit_once('-')?;
            Some(Resumption {
                id: id.to_owned(),
                count: count.parse().ok()?,
            })
        });
        resumed.unwrap_or_else(|| Resumption {
            id: uuid::Uuid::new_v4().to_string(),
            count: 0,
        })
    }

    fn next(&mut self) -> SessionResumptionUpdate {
        self.count += 1;
        SessionResumptionUpdate {
            new_handle: Some(format!("sim-{}-{}", self.id, self.count)),
            resumable: Some(true),
        }
    }
}

fn sim_message() -> LlmResponse {
    LlmResponse {
        model_version: Some("sim".into()),
        ..LlmResponse::default()
    }
}

/// The sim's VAD settings, with the session's automatic activity detection settings over them
/// as a model would honour them: padding and silence as given, a high start sensitivity hearing
/// quieter speech, a high (low) end sensitivity ending on shorter (longer) pauses.
fn vad_settings(sim: &SimConfig, config: &LiveConnectConfig) -> VadSettings {
    let mut vad = VadSettings {
        threshold_dbfs: sim.vad_threshold_dbfs(),
        min_speech_ms: sim.vad_min_speech_ms,
        silence_ms: sim.vad_silence_ms,
    };
    let Some(auto) = config
        .realtime_input_config
        .as_ref()
        .and_then(|r| r.automatic_activity_detection.as_ref())
    else {
        return vad;
    };
    match auto.start_of_speech_sensitivity {
        Some(StartSensitivity::High) => vad.threshold_dbfs -= 6.0,
        Some(StartSensitivity::Low) => vad.threshold_dbfs += 6.0,
        Some(StartSensitivity::Unspecified) | None => {}
    }
    match auto.end_of_speech_sensitivity {
        Some(EndSensitivity::High) => vad.silence_ms = vad.silence_ms * 3 / 5,
        Some(EndSensitivity::Low) => vad.silence_ms = vad.silence_ms * 8 / 5,
        Some(EndSensitivity::Unspecified) | None => {}
    }
    if let Some(ms) = auto.prefix_padding_ms {
        vad.min_speech_ms = ms;
    }
    if let Some(ms) = auto.silence_duration_ms {
        vad.silence_ms = ms;
    }
    vad
}

impl Session {
    fn new(sim: SimConfig, config: LiveConnectConfig) -> Self {
        let realtime = config.realtime_input_config.as_ref();
        let manual = realtime.is_some_and(|r| r.automatic_detection_disabled());
        let activity_interrupts = realtime.is_none_or(|r| r.activity_interrupts());
        let history: u64 = config
            .history
            .iter()
            .map(|c| text_tokens(&c.joined_text()))
            .sum();
        let instruction = config.system_instruction.as_deref().map_or(0, text_tokens);
        let resumption = config
            .session_resumption
            .as_ref()
            .map(|r| Resumption::new(r.handle.as_deref()));
        // A resumed session carries on with the context it had, not the one sent now.
        let resumed = config
            .session_resumption
            .as_ref()
            .and_then(|r| r.handle.as_deref())
            .and_then(recall);
        Session {
            vad: Vad::new(vad_settings(&sim, &config), DEFAULT_INPUT_RATE),
            rate: DEFAULT_INPUT_RATE,
            media_kind: (String::new(), MediaKind::Other),
            sim,
            manual,
            activity_interrupts,
            track: Track::default(),
            vad_events: Vec::new(),
            hearing: None,
            activity_start: None,
            pending_text: Vec::new(),
            context: resumed.unwrap_or(PromptTokens {
                text: instruction + history,
                audio: 0,
            }),
            immediate: VecDeque::new(),
            answers: VecDeque::new(),
            resumption,
            ignored_media: 0,
            awaiting: None,
            background: VecDeque::new(),
            config,
        }
    }

    /// When the next message is due, if there is one.
    fn next_due(&self) -> Option<Instant> {
        match self.immediate.front() {
            Some((at, _)) => Some(*at),
            None => self.answers.front().and_then(Answer::next_due),
        }
    }

    /// Takes the next message to send (call when it is due).
    fn next_message(&mut self) -> Option<LlmResponse> {
        if let Some((_, message)) = self.immediate.pop_front() {
            return Some(message);
        }
        let answer = self.answers.front_mut()?;
        let message = answer.next_message();
        if answer.is_done() {
            self.answers.pop_front();
        }
        if message.as_ref().is_some_and(|m| m.turn_complete) {
            if let Some(resumption) = &mut self.resumption {
                let update = resumption.next();
                if let Some(handle) = &update.new_handle {
                    remember(handle, self.context);
                }
                self.immediate.push_back((
                    Instant::now(),
                    LlmResponse {
                        session_resumption_update: Some(update),
                        ..sim_message()
                    },
                ));
            }
        }
        message
    }

    fn handle(&mut self, input: LiveInput) {
        match input {
            LiveInput::Content {
                content,
                turn_complete,
            } => {
                let text = content.joined_text();
                if !text.trim().is_empty() {
                    self.pending_text.push(text);
                }
                if turn_complete && content.role.as_deref() == Some("system") {
                    // A notice (a background result OpenAI is told of): read, no tool called.
                    let text = std::mem::take(&mut self.pending_text).join(" ");
                    let prompt = PromptTokens {
                        text: text_tokens(&text),
                        audio: 0,
                    };
                    self.end_answers();
                    self.speak(&notice_reply(&text), None, prompt);
                } else if turn_complete {
                    // A new client turn always interrupts the answer in progress (as Gemini does).
                    self.stop_answers();
                    let text = std::mem::take(&mut self.pending_text).join(" ");
                    tracing::debug!(chars = text.len(), "sim heard a text turn");
                    let prompt = PromptTokens {
                        text: text_tokens(&text),
                        audio: 0,
                    };
                    self.answer(&Heard::Text(&text), None, prompt);
                }
            }
            // Raw PCM is the only audio the sim understands.
            LiveInput::Realtime(blob) if self.media_kind(&blob) != MediaKind::Other => {
                self.audio(blob)
            }
            LiveInput::Realtime(blob) => {
                self.ignored_media += 1;
                tracing::debug!(
                    mime_type = %blob.mime_type,
                    bytes = blob.data.len(),
                    ignored = self.ignored_media,
                    "sim ignores non-PCM media"
                );
            }
            LiveInput::ActivityStart => {
                if !self.manual {
                    tracing::debug!("sim ignores activityStart: automatic detection is on");
                    return;
                }
                self.track.clear();
                self.activity_start = Some(self.track.end());
                self.user_started_speaking();
            }
            LiveInput::ActivityEnd => {
                let Some(start) = self.activity_start.take() else {
                    tracing::debug!("sim ignores activityEnd outside an activity");
                    return;
                };
                let pcm = self.track.slice(start, self.track.end());
                self.track.clear();
                if pcm.is_empty() {
                    tracing::debug!("sim ignores an activity without audio");
                } else {
                    self.heard_speech(pcm);
                }
            }
            LiveInput::AudioStreamEnd => {
                if self.manual {
                    return;
                }
                if let Some((start, end)) = self.vad.finish() {
                    let pcm = self.track.slice(start, end);
                    self.heard_speech(pcm);
                }
                self.track.forget_before(self.vad.keep_from());
            }
            LiveInput::ToolResponse(responses) => self.tool_responses(responses),
        }
    }

    /// What the blob's mime type says, parsed only when it differs from the last one's.
    fn media_kind(&mut self, blob: &Blob) -> MediaKind {
        if self.media_kind.0 != blob.mime_type {
            self.media_kind = (blob.mime_type.clone(), MediaKind::of(blob));
        }
        self.media_kind.1
    }

    /// Realtime PCM from the user.
    fn audio(&mut self, blob: Blob) {
        let MediaKind::Pcm(rate) = self.media_kind(&blob) else {
            return;
        };
        if rate != self.rate {
            tracing::debug!(from = self.rate, to = rate, "sim input sample rate changed");
            self.handle(LiveInput::AudioStreamEnd);
            self.rate = rate;
            self.vad = Vad::new(vad_settings(&self.sim, &self.config), rate);
            self.track = Track::default();
            self.activity_start = self.activity_start.map(|_| 0);
        }
        let data = whole_samples(blob.data);
        if data.is_empty() {
            return;
        }
        if self.manual {
            // Outside an activity the audio is not part of any utterance.
            if self.activity_start.is_some() {
                self.track.push(data);
            }
            return;
        }
        self.track.push(data.clone());
        let mut events = std::mem::take(&mut self.vad_events);
        self.vad.push(&data, &mut events);
        self.hearing = blob.received;
        for event in events.drain(..) {
            match event {
                VadEvent::Start => self.user_started_speaking(),
                VadEvent::End { start, end } => {
                    let pcm = self.track.slice(start, end);
                    self.heard_speech(pcm);
                }
            }
        }
        self.hearing = None;
        self.vad_events = events;
        self.track.forget_before(self.vad.keep_from());
    }

    /// Speech started: barge in on the answer being given.
    fn user_started_speaking(&mut self) {
        tracing::debug!("sim hears speech");
        if self.activity_interrupts {
            self.stop_answers();
        }
    }

    /// Drops every answer not yet given and voids the calls the sim waits for.
    fn stop_answers(&mut self) {
        self.cancel_tool_calls();
        self.end_answers();
    }

    /// Drops every answer not yet given. One under way ends as Gemini ends it: `interrupted`,
    /// then `turnComplete` with the usage of what was generated.
    fn end_answers(&mut self) {
        let under_way = self
            .answers
            .front()
            .filter(|a| a.started())
            .map(Answer::interrupted_usage);
        self.answers.clear();
        if let Some(usage) = under_way {
            tracing::debug!("sim answer interrupted");
            let now = Instant::now();
            self.immediate.push_back((
                now,
                LlmResponse {
                    interrupted: true,
                    ..sim_message()
                },
            ));
            self.immediate.push_back((
                now,
                LlmResponse {
                    usage_metadata: Some(usage),
                    turn_complete: true,
                    ..sim_message()
                },
            ));
        }
    }

    /// Calls still unanswered when the user speaks or types again are void, as Gemini voids
    /// them: `toolCallCancellation` with their ids (after the calls themselves, should they still
    /// be queued), and their late responses are ignored.
    fn cancel_tool_calls(&mut self) {
        let Some(awaiting) = self.awaiting.take() else {
            return;
        };
        let ids: Vec<String> = awaiting
            .calls
            .iter()
            .filter(|c| !awaiting.responses.iter().any(|r| r.id == c.id))
            .filter_map(|c| c.id.clone())
            .collect();
        if ids.is_empty() {
            return;
        }
        tracing::debug!(
            calls = ids.len(),
            "sim cancels the tool calls it waited for"
        );
        self.immediate.push_back((
            Instant::now(),
            LlmResponse {
                tool_call_cancellations: ids,
                ..sim_message()
            },
        ));
    }

    /// An utterance ended: transcribe it, then answer it with a voice echo.
    fn heard_speech(&mut self, pcm: super::pcm::Pcm) {
        let seconds = pcm.len() as f64 / f64::from(self.rate);
        tracing::debug!(seconds, "sim heard an utterance");
        if self.config.input_audio_transcription {
            self.immediate.push_back((
                Instant::now(),
                LlmResponse {
                    input_transcription: Some(Transcription::new(
                        speech_transcript(seconds),
                        false,
                    )),
                    ..sim_message()
                },
            ));
        }
        let pending = std::mem::take(&mut self.pending_text).join(" ");
        let prompt = PromptTokens {
            text: text_tokens(&pending),
            audio: audio_tokens(seconds),
        };
        let echo = Voice::Echo(Echo::new(pcm, self.rate));
        self.answer(&Heard::Speech { seconds }, Some(echo), prompt);
    }

    /// Tool results: a non-blocking call's as its scheduling says; once every blocking call is
    /// answered, the answer that reads them.
    fn tool_responses(&mut self, mut responses: Vec<FunctionResponse>) {
        responses.retain(|r| !self.background_result(r));
        if responses.is_empty() {
            return;
        }
        let Some(awaiting) = &mut self.awaiting else {
            // Streaming tools keep reporting after their first response; the sim just listens.
            tracing::debug!(
                count = responses.len(),
                "sim got tool responses it is not waiting for"
            );
            return;
        };
        awaiting.responses.extend(responses);
        let answered = awaiting.calls.iter().all(|c| {
            awaiting
                .responses
                .iter()
                .any(|r| r.id == c.id || (r.id.is_none() && r.name == c.name))
        });
        if !answered {
            return;
        }
        let Some(done) = self.awaiting.take() else {
            return;
        };
        let text = tool_answer(&done.asked, &done.calls, &done.responses);
        let results: u64 = done
            .responses
            .iter()
            .map(|r| text_tokens(&r.response.to_string()))
            .sum();
        let prompt = PromptTokens {
            text: done.prompt.text + results,
            audio: done.prompt.audio,
        };
        self.speak(&text, None, prompt);
    }

    /// Takes the result of a non-blocking call it made (false for any other), as Gemini does:
    /// `INTERRUPT` stops the answer under way and reads it out, `WHEN_IDLE` reads it once the
    /// answers queued are given, `SILENT` only adds it to the context.
    fn background_result(&mut self, response: &FunctionResponse) -> bool {
        let Some(at) = self
            .background
            .iter()
            .position(|(call, _)| call.id.is_some() && call.id == response.id)
        else {
            return false;
        };
        let Some((call, asked)) = self.background.remove(at) else {
            return false;
        };
        let tokens = text_tokens(&response.response.to_string());
        let scheduling = response.scheduling.unwrap_or_default();
        tracing::debug!(
            tool = call.name,
            ?scheduling,
            "sim got a non-blocking result"
        );
        let text = tool_answer(
            &asked,
            std::slice::from_ref(&call),
            std::slice::from_ref(response),
        );
        let turn = PromptTokens {
            text: tokens,
            audio: 0,
        };
        match scheduling {
            Scheduling::Silent => self.context.text += tokens,
            Scheduling::WhenIdle => self.speak(&text, None, turn),
            Scheduling::Interrupt => {
                self.end_answers();
                self.speak(&text, None, turn);
            }
        }
        true
    }

    /// Schedules the answer to a turn after the reply delay (and after answers still queued).
    fn answer(&mut self, heard: &Heard<'_>, echo: Option<Voice>, turn: PromptTokens) {
        let text = match plan_reply(heard, &self.config) {
            Reply::Say(text) => text,
            Reply::Call(calls) => {
                tracing::debug!(tools = calls.len(), "sim calls tools");
                let asked = match heard {
                    Heard::Text(text) => (*text).to_owned(),
                    Heard::Speech { seconds } => speech_transcript(*seconds),
                };
                self.immediate.push_back((
                    Instant::now() + self.sim.reply_delay(),
                    LlmResponse {
                        tool_calls: calls.clone(),
                        ..sim_message()
                    },
                ));
                // Non-blocking calls run on while the sim goes on; it waits for the others.
                let (later, now): (Vec<FunctionCall>, Vec<FunctionCall>) = calls
                    .into_iter()
                    .partition(|c| self.is_non_blocking(&c.name));
                if !later.is_empty() && now.is_empty() {
                    self.speak(&running_answer(&later), None, turn);
                }
                for call in later {
                    if self.background.len() == MAX_BACKGROUND_CALLS {
                        self.background.pop_front();
                    }
                    self.background.push_back((call, asked.clone()));
                }
                if !now.is_empty() {
                    self.awaiting = Some(AwaitingTools {
                        asked,
                        calls: now,
                        responses: Vec::new(),
                        prompt: turn,
                    });
                }
                return;
            }
        };
        self.speak(&text, echo, turn);
    }

    /// True for a tool the session declared non-blocking.
    fn is_non_blocking(&self, name: &str) -> bool {
        self.config
            .tools
            .iter()
            .any(|t| t.name == name && t.is_non_blocking())
    }

    /// Schedules `text` as an answer after the reply delay (and after answers still queued).
    fn speak(&mut self, text: &str, echo: Option<Voice>, turn: PromptTokens) {
        let modality = self.config.modality();
        let style = AnswerStyle {
            modality,
            transcribe: self.config.output_audio_transcription,
            real_time: self.sim.pacing == Pacing::RealTime,
            chunk_samples: (OUTPUT_RATE * self.sim.chunk_ms() / 1000) as usize,
            text_words: self.sim.text_chunk_words(),
            text_interval: self.sim.text_chunk_interval(),
            pitch: voice_pitch(
                self.config
                    .speech_config
                    .as_ref()
                    .and_then(|s| s.voice_name.as_deref()),
            ),
        };
        let prompt = PromptTokens {
            text: self.context.text + turn.text,
            audio: self.context.audio + turn.audio,
        };
        let mut base = Instant::now() + self.sim.reply_delay();
        if let Some(last) = self.answers.back() {
            base = base.max(last.ends_at());
        }
        let mut answer = Answer::new(text, echo, prompt, style, base);
        answer.prompted_by = self.hearing;
        // The conversation grows by this turn and the answer, re-read by the next prompt.
        self.context.text += turn.text;
        self.context.audio += turn.audio;
        match modality {
            Modality::Text => self.context.text += answer.candidates(),
            Modality::Audio => self.context.audio += answer.candidates(),
        }
        self.answers.push_back(answer);
    }
}

#[cfg(test)]
mod vad_settings_tests {
    use super::*;
    use crate::model::{AutomaticActivityDetection, RealtimeInputConfig};

    fn with(auto: AutomaticActivityDetection) -> VadSettings {
        let config = LiveConnectConfig {
            realtime_input_config: Some(RealtimeInputConfig {
                automatic_activity_detection: Some(auto),
                ..RealtimeInputConfig::default()
            }),
            ..LiveConnectConfig::default()
        };
        vad_settings(&SimConfig::default(), &config)
    }

    #[test]
    fn detection_settings_tune_the_sims_vad() {
        let base = vad_settings(&SimConfig::default(), &LiveConnectConfig::default());
        let eager = with(AutomaticActivityDetection {
            start_of_speech_sensitivity: Some(StartSensitivity::High),
            end_of_speech_sensitivity: Some(EndSensitivity::High),
            ..AutomaticActivityDetection::default()
        });
        assert!(
            eager.threshold_dbfs < base.threshold_dbfs,
            "hears quieter speech"
        );
        assert!(eager.silence_ms < base.silence_ms, "ends on shorter pauses");
        let patient = with(AutomaticActivityDetection {
            start_of_speech_sensitivity: Some(StartSensitivity::Low),
            end_of_speech_sensitivity: Some(EndSensitivity::Low),
            ..AutomaticActivityDetection::default()
        });
        assert!(patient.threshold_dbfs > base.threshold_dbfs);
        assert!(patient.silence_ms > base.silence_ms);
        let explicit = with(AutomaticActivityDetection {
            end_of_speech_sensitivity: Some(EndSensitivity::High),
            prefix_padding_ms: Some(240),
            silence_duration_ms: Some(1200),
            ..AutomaticActivityDetection::default()
        });
        assert_eq!((explicit.min_speech_ms, explicit.silence_ms), (240, 1200));
    }
}
