//! `--protocol twilio`: each session is a phone call (see [`super::phone`]): it dials, speaks an
//! utterance, waits for the answer to play out, and repeats until the run's end, then hangs up.
//! The first answer audio is timed from the end of speech and from when the model could answer,
//! as for WebSocket sessions.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::error::SessionFailure;
use super::phone::{Dial, Phone, PhoneEvent, Utterance};
use super::session::{Live, Outcome, Plan};

/// Longest wait for an answer's first audio.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// An answer is over once no audio came for this long (the gateway sends it ahead of playback).
const ANSWER_DONE: Duration = Duration::from_millis(800);

/// What every call shares besides the plan.
#[derive(Debug)]
pub struct CallPlan {
    /// The gateway's HTTP base.
    pub http_base: String,
    /// The carrier route.
    pub carrier: String,
    /// Signs webhooks when set.
    pub auth_token: Option<String>,
    /// The utterances, cycled.
    pub utterances: Vec<Utterance>,
    /// One HTTP client for every webhook.
    pub http: reqwest::Client,
}

/// Runs call `index` to its end.
pub async fn run(index: usize, plan: Arc<Plan>, calls: Arc<CallPlan>, live: Arc<Live>) -> Outcome {
    let mut outcome = Outcome {
        session_id: format!("CA{}{index:024}", plan.run_id),
        ..Outcome::default()
    };
    let dial = Dial {
        http_base: calls.http_base.clone(),
        carrier: calls.carrier.clone(),
        auth_token: calls.auth_token.clone(),
        call_sid: outcome.session_id.clone(),
        from: format!("+1555{index:07}"),
        to: "+15550000000".into(),
        query: String::new(),
    };
    let started = Instant::now();
    let mut phone = match Phone::dial(&calls.http, &dial).await {
        Ok(phone) => phone,
        Err(error) => {
            outcome.errors.push(error.to_string());
            live.errors.fetch_add(1, Ordering::Relaxed);
            return outcome;
        }
    };
    outcome.connect_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
    live.connected.fetch_add(1, Ordering::Relaxed);
    let call_started = Instant::now();
    let mut turn: u32 = 0;
    while Instant::now() < plan.deadline
        && !plan.stop.is_fired()
        && (plan.turns == 0 || turn < plan.turns)
    {
        let utterance = &calls.utterances[(index + turn as usize) % calls.utterances.len()];
        if let Err(error) = one_turn(&plan, &mut phone, utterance, &mut outcome).await {
            outcome.errors.push(error.to_string());
            live.errors.fetch_add(1, Ordering::Relaxed);
            break;
        }
        turn += 1;
        outcome.turns += 1;
        live.turns.fetch_add(1, Ordering::Relaxed);
    }
    phone.hang_up().await;
    let closed = phone
        .until(Duration::from_secs(10), |e| {
            matches!(e, PhoneEvent::Closed(_))
        })
        .await;
    if closed.is_err() {
        outcome.unexpected_close = true;
        outcome
            .errors
            .push("the gateway did not close the call after stop".into());
    }
    live.connected.fetch_sub(1, Ordering::Relaxed);
    let frames = (call_started.elapsed().as_millis() / 20) as u64;
    outcome.frames_sent += frames;
    live.frames_sent.fetch_add(frames, Ordering::Relaxed);
    outcome
}

/// Speaks one utterance and waits for its answer to play out.
async fn one_turn(
    plan: &Plan,
    phone: &mut Phone,
    utterance: &Utterance,
    outcome: &mut Outcome,
) -> Result<(), SessionFailure> {
    phone.speak(utterance).await;
    let spoke = match phone
        .until(Duration::from_secs(60), |e| {
            matches!(e, PhoneEvent::Spoke { .. } | PhoneEvent::Closed(_))
        })
        .await
    {
        Ok((PhoneEvent::Spoke { at }, _)) => at,
        _ => return Err(SessionFailure::EndedWhileSpeaking),
    };
    let answerable = spoke + plan.frame * plan.model_delay_frames;
    let first = phone
        .until(ANSWER_TIMEOUT, |e| {
            matches!(e, PhoneEvent::Audio { .. } | PhoneEvent::Closed(_))
        })
        .await;
    let (bytes, at) = match first {
        Ok((PhoneEvent::Audio { bytes, at }, _)) => (bytes, at),
        Ok((PhoneEvent::Closed(code), _)) => return Err(SessionFailure::CallClosed(code)),
        _ => return Err(SessionFailure::NoAnswer(ANSWER_TIMEOUT)),
    };
    outcome
        .latencies_ms
        .push(at.saturating_duration_since(spoke).as_secs_f64() * 1000.0);
    outcome
        .gateway_ms
        .push(at.saturating_duration_since(answerable).as_secs_f64() * 1000.0);
    outcome.frames_received += 1;
    outcome.audio_bytes_received += bytes as u64;
    loop {
        match phone.next(ANSWER_DONE).await {
            Some(PhoneEvent::Audio { bytes, .. }) => {
                outcome.frames_received += 1;
                outcome.audio_bytes_received += bytes as u64;
            }
            Some(PhoneEvent::Closed(code)) => return Err(SessionFailure::ClosedMidAnswer(code)),
            Some(PhoneEvent::Clear) => outcome.interrupted += 1,
            Some(PhoneEvent::Unexpected(text)) => {
                return Err(SessionFailure::NotTwilio(text.chars().take(120).collect()))
            }
            Some(_) => {}
            None => return Ok(()),
        }
    }
}
