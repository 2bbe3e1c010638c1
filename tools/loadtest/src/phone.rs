//! A simulated phone on a Twilio Media Stream, as Twilio's side of a call behaves: it posts the
//! voice webhook (signed with an auth token when given), connects to the `<Stream>` the TwiML
//! names with its `<Parameter>`s, sends `connected` and `start`, then a 20 ms `media` frame of
//! μ-law on a fixed clock (speech when told to speak, silence otherwise), plays the audio it
//! receives in real time and acknowledges each `mark` once the audio before it has played (or at
//! once when a `clear` drops it), sends `dtmf` for keys pressed and `stop` when it hangs up.
//! Knows the gateway only by that protocol.

use std::collections::VecDeque;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use livegate::audio::{g711, resample::Resampler};

use crate::error::SessionFailure;

/// μ-law bytes in one 20 ms frame at 8 kHz.
pub const FRAME_ULAW: usize = 160;
/// μ-law silence.
const SILENCE: u8 = 0xff;
/// The frame period.
const FRAME: Duration = Duration::from_millis(20);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Who calls whom, and where.
#[derive(Debug, Clone)]
pub struct Dial {
    /// The gateway's HTTP base, e.g. `http://127.0.0.1:8080`.
    pub http_base: String,
    /// The carrier's route name (`twilio`).
    pub carrier: String,
    /// Signs the webhook as Twilio does, when set.
    pub auth_token: Option<String>,
    /// The call's id (`CA…`).
    pub call_sid: String,
    /// The caller's number.
    pub from: String,
    /// The number called.
    pub to: String,
    /// Query string of the webhook URL (its parameters reach the call's state).
    pub query: String,
}

/// What the phone saw, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum PhoneEvent {
    /// Answer audio arrived: μ-law bytes, and when.
    Audio {
        /// Bytes of μ-law (8 per millisecond).
        bytes: usize,
        /// When it arrived.
        at: Instant,
    },
    /// The last speech frame of an utterance went out.
    Spoke {
        /// When.
        at: Instant,
    },
    /// The gateway sent `clear`.
    Clear,
    /// A mark was acknowledged back to the gateway.
    Acked(String),
    /// The gateway closed the stream (its close code).
    Closed(Option<u16>),
    /// The gateway sent something that is not Twilio's protocol.
    Unexpected(String),
}

/// What the phone's writer is told.
enum Command {
    /// Speak these 20 ms μ-law frames (base64), the last speech in frame `speech_end`.
    Speak(Vec<String>, usize),
    Press(char),
    Ack(String),
    Raw(String),
    HangUp,
}

/// A phone in a call.
pub struct Phone {
    commands: mpsc::Sender<Command>,
    events: mpsc::Receiver<PhoneEvent>,
    /// The stream's `streamSid`.
    pub stream_sid: String,
    /// The TwiML the webhook answered.
    pub twiml: String,
}

/// An utterance as the phone sends it: 20 ms frames of base64 μ-law at 8 kHz, and the index of
/// the frame holding its last speech.
#[derive(Debug, Clone)]
pub struct Utterance {
    /// The frames.
    pub frames: Vec<String>,
    /// The frame its speech ends in.
    pub speech_end: usize,
}

impl Utterance {
    /// From PCM16 at 16 kHz, whose speech ends at byte `speech_end`.
    pub fn from_pcm16k(pcm: &[u8], speech_end: usize) -> Self {
        let mut resampler = to_phone_rate();
        let mut pcm8 = resampler.push(pcm);
        pcm8.extend(resampler.flush());
        let mut ulaw = Vec::new();
        g711::encode_into(&pcm8, &mut ulaw);
        ulaw.resize(ulaw.len().next_multiple_of(FRAME_ULAW), SILENCE);
        let frames = ulaw
            .chunks(FRAME_ULAW)
            .map(|f| STANDARD.encode(f))
            .collect();
        // 640 bytes of 16 kHz PCM16 per 20 ms frame.
        Utterance {
            frames,
            speech_end: speech_end.div_ceil(640).saturating_sub(1),
        }
    }
}

/// Percent-encodes a form value.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Twilio's signature of a webhook: HMAC-SHA1 over the URL and the sorted fields.
pub fn twilio_signature(token: &str, url: &str, fields: &[(&str, &str)]) -> String {
    let mut sorted = fields.to_vec();
    sorted.sort();
    let mut data = url.to_owned();
    for (name, value) in sorted {
        data.push_str(name);
        data.push_str(value);
    }
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, token.as_bytes());
    STANDARD.encode(ring::hmac::sign(&key, data.as_bytes()))
}

/// Unescapes the five XML entities.
fn xml_text(raw: &str) -> String {
    raw.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The value of `attr="…"` after `from` in `xml`.
fn attribute<'x>(xml: &'x str, from: usize, attr: &str) -> Option<(&'x str, usize)> {
    let needle = format!("{attr}=\"");
    let start = xml[from..].find(&needle)? + from + needle.len();
    let end = xml[start..].find('"')? + start;
    Some((&xml[start..end], end))
}

/// The stream URL and parameters of a `<Connect><Stream>` answer.
pub fn parse_twiml(xml: &str) -> Option<(String, Vec<(String, String)>)> {
    let stream = xml.find("<Stream")?;
    let (url, mut at) = attribute(xml, stream, "url")?;
    let mut parameters = Vec::new();
    while let Some(p) = xml[at..].find("<Parameter") {
        let (name, next) = attribute(xml, at + p, "name")?;
        let (value, next) = attribute(xml, next, "value")?;
        parameters.push((xml_text(name), xml_text(value)));
        at = next;
    }
    Some((xml_text(url), parameters))
}

impl Phone {
    /// Places a call: the webhook, then the stream, `connected` and `start`.
    pub async fn dial(http: &reqwest::Client, dial: &Dial) -> Result<Phone, SessionFailure> {
        let path = format!("/telephony/{}/voice", dial.carrier);
        let query = if dial.query.is_empty() {
            String::new()
        } else {
            format!("?{}", dial.query)
        };
        let url = format!("{}{path}{query}", dial.http_base);
        let fields = [
            ("AccountSid", "AC00000000000000000000000000000000"),
            ("CallSid", dial.call_sid.as_str()),
            ("CallStatus", "ringing"),
            ("Direction", "inbound"),
            ("From", dial.from.as_str()),
            ("To", dial.to.as_str()),
        ];
        let body = fields
            .iter()
            .map(|(n, v)| format!("{n}={}", form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut request = http
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(token) = &dial.auth_token {
            request = request.header("x-twilio-signature", twilio_signature(token, &url, &fields));
        }
        let response = request.send().await.map_err(SessionFailure::Webhook)?;
        let status = response.status();
        let twiml = response.text().await.map_err(SessionFailure::Webhook)?;
        if !status.is_success() {
            return Err(SessionFailure::WebhookRefused {
                status,
                body: twiml,
            });
        }
        let (stream_url, parameters) =
            parse_twiml(&twiml).ok_or_else(|| SessionFailure::NoStream(twiml.clone()))?;
        let (socket, _) = tokio_tungstenite::connect_async(stream_url.as_str())
            .await
            .map_err(SessionFailure::StreamConnect)?;
        let stream_sid = format!("MZ{}", &uuid::Uuid::new_v4().simple().to_string()[..32]);
        let (mut sink, stream) = socket.split();
        let custom: serde_json::Map<String, Value> = parameters
            .into_iter()
            .map(|(n, v)| (n, Value::String(v)))
            .collect();
        let connected = json!({"event": "connected", "protocol": "Call", "version": "1.0.0"});
        let start = json!({
            "event": "start",
            "sequenceNumber": "1",
            "start": {
                "accountSid": "AC00000000000000000000000000000000",
                "streamSid": stream_sid,
                "callSid": dial.call_sid,
                "tracks": ["inbound"],
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                "customParameters": custom,
            },
            "streamSid": stream_sid,
        });
        for message in [connected, start] {
            sink.send(Message::Text(message.to_string().into()))
                .await
                .map_err(SessionFailure::StreamSend)?;
        }
        let (commands, commands_rx) = mpsc::channel(64);
        let (events_tx, events) = mpsc::channel(4096);
        tokio::spawn(write(
            sink,
            commands_rx,
            events_tx.clone(),
            stream_sid.clone(),
            frame_phase(&dial.call_sid),
        ));
        tokio::spawn(read(stream, commands.clone(), events_tx));
        Ok(Phone {
            commands,
            events,
            stream_sid,
            twiml,
        })
    }

    /// Speaks an utterance (after what is already being said).
    pub async fn speak(&self, utterance: &Utterance) {
        let command = Command::Speak(utterance.frames.clone(), utterance.speech_end);
        let _ = self.commands.send(command).await;
    }

    /// Presses keys.
    pub async fn press(&self, keys: &str) {
        for key in keys.chars() {
            let _ = self.commands.send(Command::Press(key)).await;
        }
    }

    /// Sends a text frame as is (to test what the gateway makes of bad messages).
    pub async fn send_raw(&self, text: &str) {
        let _ = self.commands.send(Command::Raw(text.to_owned())).await;
    }

    /// Hangs up: `stop`, then the socket closes.
    pub async fn hang_up(&self) {
        let _ = self.commands.send(Command::HangUp).await;
    }

    /// The next thing the phone saw, within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<PhoneEvent> {
        tokio::time::timeout(wait, self.events.recv())
            .await
            .ok()
            .flatten()
    }

    /// Waits (up to `wait`) for an event `f` accepts, returning it and everything seen before.
    pub async fn until(
        &mut self,
        wait: Duration,
        f: impl Fn(&PhoneEvent) -> bool,
    ) -> Result<(PhoneEvent, Vec<PhoneEvent>), Vec<PhoneEvent>> {
        let deadline = Instant::now() + wait;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(event) if f(&event) => return Ok((event, seen)),
                Some(event) => seen.push(event),
                None => return Err(seen),
            }
        }
    }
}

/// Where in the 20 ms frame period a call's frames go out: spread over the period by its call
/// id, as independent phones' are. Calls dialled at the ramp's fixed interval would otherwise
/// send on a few phases, every call's frame landing together: a burst no set of phones makes,
/// which the WebSocket load spreads too (`Plan::clock_start`).
fn frame_phase(call_sid: &str) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    call_sid.hash(&mut hasher);
    FRAME.mul_f64((hasher.finish() % 1024) as f64 / 1024.0)
}

/// The writer: a 20 ms frame clock of speech or silence (starting `phase` from now), keys,
/// acknowledgements.
async fn write(
    mut sink: SplitSink<Socket, Message>,
    mut commands: mpsc::Receiver<Command>,
    events: mpsc::Sender<PhoneEvent>,
    stream_sid: String,
    phase: Duration,
) {
    let silence = STANDARD.encode([SILENCE; FRAME_ULAW]);
    let mut speech: VecDeque<(String, bool)> = VecDeque::new();
    let mut sequence: u64 = 1;
    let mut chunk: u64 = 0;
    let started = Instant::now();
    let mut next_frame = started + phase;
    loop {
        let command = tokio::select! {
            () = sleep_until(next_frame) => None,
            command = commands.recv() => match command {
                Some(command) => Some(command),
                None => return,
            },
        };
        let text = match command {
            None => {
                next_frame += FRAME;
                chunk += 1;
                let (payload, last_speech) = speech
                    .pop_front()
                    .unwrap_or_else(|| (silence.clone(), false));
                sequence += 1;
                let timestamp = (Instant::now() - started).as_millis();
                let frame = format!(
                    "{{\"event\":\"media\",\"sequenceNumber\":\"{sequence}\",\"media\":{{\"track\":\"inbound\",\"chunk\":\"{chunk}\",\"timestamp\":\"{timestamp}\",\"payload\":\"{payload}\"}},\"streamSid\":\"{stream_sid}\"}}"
                );
                if sink.send(Message::Text(frame.into())).await.is_err() {
                    return;
                }
                if last_speech {
                    let _ = events.try_send(PhoneEvent::Spoke { at: Instant::now() });
                }
                continue;
            }
            Some(Command::Speak(frames, speech_end)) => {
                speech.extend(
                    frames
                        .into_iter()
                        .enumerate()
                        .map(|(i, f)| (f, i == speech_end)),
                );
                continue;
            }
            Some(Command::Press(key)) => {
                sequence += 1;
                json!({"event": "dtmf", "streamSid": stream_sid, "sequenceNumber": sequence.to_string(), "dtmf": {"track": "inbound_track", "digit": key.to_string()}}).to_string()
            }
            Some(Command::Ack(name)) => {
                sequence += 1;
                json!({"event": "mark", "sequenceNumber": sequence.to_string(), "streamSid": stream_sid, "mark": {"name": name}}).to_string()
            }
            Some(Command::Raw(text)) => text,
            Some(Command::HangUp) => {
                sequence += 1;
                let stop = json!({"event": "stop", "sequenceNumber": sequence.to_string(), "stop": {"accountSid": "AC00000000000000000000000000000000", "callSid": "CA"}, "streamSid": stream_sid});
                let _ = sink.send(Message::Text(stop.to_string().into())).await;
                let _ = sink.close().await;
                return;
            }
        };
        if sink.send(Message::Text(text.into())).await.is_err() {
            return;
        }
    }
}

/// The reader: plays the audio on a real-time clock, acknowledges marks once played (at once
/// after a `clear`), and reports what came.
async fn read(
    mut stream: SplitStream<Socket>,
    commands: mpsc::Sender<Command>,
    events: mpsc::Sender<PhoneEvent>,
) {
    let mut playback_end = Instant::now();
    let mut marks: VecDeque<(Instant, String)> = VecDeque::new();
    loop {
        let due = marks.front().map(|(at, _)| *at);
        let message = tokio::select! {
            () = sleep_until(due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if due.is_some() => {
                if let Some((_, name)) = marks.pop_front() {
                    let _ = events.try_send(PhoneEvent::Acked(name.clone()));
                    let _ = commands.send(Command::Ack(name)).await;
                }
                continue;
            }
            message = stream.next() => message,
        };
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(frame))) => {
                let _ = events
                    .send(PhoneEvent::Closed(frame.map(|f| u16::from(f.code))))
                    .await;
                return;
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => {
                let _ = events.send(PhoneEvent::Closed(None)).await;
                return;
            }
        };
        let now = Instant::now();
        let Ok(message) = serde_json::from_str::<Value>(text.as_str()) else {
            let _ = events.try_send(PhoneEvent::Unexpected(text.to_string()));
            continue;
        };
        match message["event"].as_str() {
            Some("media") => {
                let payload = message["media"]["payload"].as_str().unwrap_or_default();
                let bytes = STANDARD.decode(payload).map(|b| b.len()).unwrap_or(0);
                playback_end = playback_end.max(now) + Duration::from_micros(bytes as u64 * 125);
                let _ = events.try_send(PhoneEvent::Audio { bytes, at: now });
            }
            Some("mark") => {
                let name = message["mark"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                marks.push_back((playback_end.max(now), name));
            }
            Some("clear") => {
                playback_end = now;
                let _ = events.try_send(PhoneEvent::Clear);
                // Twilio acknowledges every mark a clear drops, at once.
                for (_, name) in marks.drain(..) {
                    let _ = events.try_send(PhoneEvent::Acked(name.clone()));
                    let _ = commands.send(Command::Ack(name)).await;
                }
            }
            _ => {
                let _ = events.try_send(PhoneEvent::Unexpected(text.to_string()));
            }
        }
    }
}

/// The resampler from the clips' 16 kHz to the phone's 8 kHz.
#[allow(
    clippy::expect_used,
    reason = "16 and 8 kHz are constants the resampler supports, not input"
)]
fn to_phone_rate() -> Resampler {
    Resampler::new(16_000, 8_000).expect("16 to 8 kHz")
}

/// Plays on `bytes` of μ-law: how long it lasts.
pub fn ulaw_duration(bytes: usize) -> Duration {
    Duration::from_micros(bytes as u64 * 125)
}

/// A clip as base64-free μ-law (for tests that check what the gateway heard).
pub fn ulaw_of(pcm16k: &Bytes) -> Vec<u8> {
    let mut resampler = to_phone_rate();
    let pcm8 = resampler.push(pcm16k);
    let mut ulaw = Vec::new();
    g711::encode_into(&pcm8, &mut ulaw);
    ulaw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_frames_are_spread_over_the_frame_period() {
        let phases: Vec<Duration> = (0..200)
            .map(|i| frame_phase(&format!("CA{i:032}")))
            .collect();
        assert!(phases.iter().all(|p| *p < FRAME));
        // Each of the period's 20 milliseconds holds some calls' frames, none most of them.
        let mut per_ms = [0usize; 20];
        for phase in &phases {
            per_ms[phase.as_millis() as usize] += 1;
        }
        assert!(per_ms.iter().all(|n| (1..=40).contains(n)), "{per_ms:?}");
        assert_eq!(
            frame_phase("CA1"),
            frame_phase("CA1"),
            "a call keeps its phase"
        );
    }

    #[test]
    fn twiml_streams_and_their_parameters_are_read() {
        let xml = "<?xml version=\"1.0\"?><Response><Connect><Stream url=\"wss://h/telephony/twilio/stream/t.k\">\
                   <Parameter name=\"From\" value=\"+1555\" /><Parameter name=\"q\" value=\"a&amp;b\" /></Stream></Connect></Response>";
        let (url, parameters) = parse_twiml(xml).unwrap();
        assert_eq!(url, "wss://h/telephony/twilio/stream/t.k");
        assert_eq!(
            parameters,
            [
                ("From".to_owned(), "+1555".to_owned()),
                ("q".to_owned(), "a&b".to_owned())
            ]
        );
        assert_eq!(form_encode("+1 555"), "%2B1%20555");
    }
}
