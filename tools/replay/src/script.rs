//! A recorded call's user side as a script: each input (typed text, an audio recording, an
//! image) with when to send it, and what the agent did after each one then. Read from the
//! bundle's events: a user's content event is typed text (or an image), a user's `fileData`
//! event announces the recording of the microphone from its timestamp on, and `turnComplete`
//! events say where the agent's turns ended.
//!
//! When to send: an input that came after the agent had finished a turn waits, in the replay,
//! for that turn to finish too and then for the same pause; one that came while the agent was
//! answering (a barge-in) goes out the same time after the input before it. So a slower or
//! faster agent shifts the inputs that waited for it, and barge-ins still land mid-answer.

use bytes::Bytes;
use serde_json::Value;

use crate::bundle::{Bundle, BundleError};
use crate::turns::Turn;

/// One user input.
#[derive(Debug, Clone)]
pub enum Input {
    /// A typed message.
    Text(String),
    /// Microphone audio, PCM16 mono.
    Audio {
        /// The samples.
        pcm: Bytes,
        /// Their rate.
        rate: u32,
    },
    /// An image, base64.
    Image {
        /// Base64 data.
        data: String,
        /// Its type.
        mime: String,
    },
}

impl Input {
    /// How long sending it takes at real time, in seconds (audio only).
    pub fn seconds(&self) -> f64 {
        match self {
            Input::Audio { pcm, rate } => pcm.len() as f64 / 2.0 / f64::from(*rate),
            _ => 0.0,
        }
    }

    /// A short description for reports.
    pub fn label(&self) -> String {
        match self {
            Input::Text(text) => format!("text {:?}", short(text, 60)),
            Input::Audio { .. } => format!("audio {:.2} s", self.seconds()),
            Input::Image { mime, .. } => format!("image {mime}"),
        }
    }
}

/// At most `n` characters.
pub fn short(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return text.to_owned();
    }
    let cut: String = text.chars().take(n).collect();
    format!("{cut}…")
}

/// When an input goes out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Anchor {
    /// After the agent's `turns`-th turn ended (and the input before it was sent), then `pause`
    /// seconds.
    AfterTurn {
        /// Turns ended before it in the recorded call.
        turns: usize,
        /// The pause, in seconds.
        pause: f64,
    },
    /// `pause` seconds after the input before it started (the first input: at once).
    AfterInput {
        /// The pause, in seconds.
        pause: f64,
    },
}

/// One input and when.
#[derive(Debug, Clone)]
pub struct Action {
    /// Seconds from the call's first input, in the recorded call.
    pub at: f64,
    /// What.
    pub input: Input,
    /// When.
    pub anchor: Anchor,
}

/// A recorded call, ready to replay.
#[derive(Debug, Clone)]
pub struct Script {
    /// The inputs, in order.
    pub actions: Vec<Action>,
    /// What the agent did after each input, then.
    pub then: Vec<Turn>,
    /// Turns the agent ended in the recorded call.
    pub turns_ended: usize,
    /// `AUDIO` when the agent spoke, else `TEXT`.
    pub modality: &'static str,
    /// From the first input to the last event, in milliseconds.
    pub length_ms: f64,
}

impl Script {
    /// The script of a bundle.
    pub fn of(bundle: &Bundle) -> Result<Script, BundleError> {
        let mut actions: Vec<(f64, Input)> = Vec::new();
        let mut spoken = false;
        for event in &bundle.events {
            spoken |= event.get("outputTranscription").is_some();
            if let Some((path, side)) = recording_path(event) {
                spoken |= side == "output";
                if side == "input" {
                    let recording =
                        bundle
                            .recording(&path)
                            .ok_or_else(|| BundleError::Missing {
                                bundle: bundle.dir.display().to_string(),
                                file: path.clone(),
                            })?;
                    actions.push((
                        timestamp(event),
                        Input::Audio {
                            pcm: recording.pcm.clone(),
                            rate: recording.rate,
                        },
                    ));
                }
                continue;
            }
            if event["author"] == "user" {
                actions.extend(
                    user_inputs(event)
                        .into_iter()
                        .map(|i| (timestamp(event), i)),
                );
            }
        }
        actions.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut ends: Vec<f64> = bundle
            .events
            .iter()
            .filter(|e| e["turnComplete"] == Value::Bool(true))
            .map(timestamp)
            .collect();
        ends.sort_by(f64::total_cmp);
        let start = actions.first().map_or(0.0, |a| a.0);
        let actions = anchored(actions, &ends, start);
        let then = turns_then(bundle, &actions, start);
        let last = bundle.events.iter().map(timestamp).fold(start, f64::max);
        Ok(Script {
            actions,
            then,
            turns_ended: ends.len(),
            modality: if spoken { "AUDIO" } else { "TEXT" },
            length_ms: (last - start).max(0.0) * 1000.0,
        })
    }
}

fn timestamp(event: &Value) -> f64 {
    event["timestamp"].as_f64().unwrap_or_default()
}

/// Gives each input its anchor: after a turn that ended since the input before it, else after
/// that input.
fn anchored(actions: Vec<(f64, Input)>, ends: &[f64], start: f64) -> Vec<Action> {
    let mut out: Vec<Action> = Vec::with_capacity(actions.len());
    let mut previous: Option<(f64, f64, usize)> = None; // start, end of sending, turns before
    for (at, input) in actions {
        let turns = ends.iter().filter(|&&end| end < at).count();
        let anchor = match previous {
            Some((_, sent, before)) if turns > before => {
                let last_end = ends[turns - 1];
                Anchor::AfterTurn {
                    turns,
                    pause: (at - last_end.max(sent)).max(0.0),
                }
            }
            Some((prev_at, _, _)) => Anchor::AfterInput {
                pause: (at - prev_at).max(0.0),
            },
            None => Anchor::AfterInput { pause: 0.0 },
        };
        previous = Some((at, at + input.seconds(), turns));
        out.push(Action {
            at: at - start,
            input,
            anchor,
        });
    }
    out
}

/// The recorded call's turns: each event goes to the last input at or before it.
fn turns_then(bundle: &Bundle, actions: &[Action], start: f64) -> Vec<Turn> {
    let mut turns = vec![Turn::default(); actions.len().max(1)];
    for event in &bundle.events {
        let at = timestamp(event) - start;
        let index = actions.iter().rposition(|a| a.at <= at + 1e-6).unwrap_or(0);
        let turn = &mut turns[index];
        match recording_path(event) {
            Some((path, "output")) => {
                if turn.first_audio_ms.is_none() {
                    turn.first_audio_ms =
                        Some((at - actions.get(index).map_or(0.0, |a| a.at)) * 1000.0);
                }
                turn.audio.push(path);
            }
            Some(_) => {}
            None => turn.add(event),
        }
    }
    turns
}

/// The bundle path and side of the recording an event announces.
pub fn recording_path(event: &Value) -> Option<(String, &'static str)> {
    let parts = event["content"]["parts"].as_array()?;
    let uri = parts
        .iter()
        .find_map(|p| p["fileData"]["fileUri"].as_str())?;
    let name = uri.split('#').next()?.rsplit('/').next()?;
    let side = if name.starts_with("adk_live_audio_storage_input_audio_") {
        "input"
    } else if name.starts_with("adk_live_audio_storage_output_audio_") {
        "output"
    } else {
        return None;
    };
    Some((format!("recordings/{name}"), side))
}

/// What a user's content event sends: its text, its images.
fn user_inputs(event: &Value) -> Vec<Input> {
    let Some(parts) = event["content"]["parts"].as_array() else {
        return Vec::new();
    };
    let mut inputs = Vec::new();
    let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
    if !text.is_empty() {
        inputs.push(Input::Text(text));
    }
    for part in parts {
        let blob = &part["inlineData"];
        let (Some(mime), Some(data)) = (blob["mimeType"].as_str(), blob["data"].as_str()) else {
            continue;
        };
        if mime.starts_with("image/") {
            inputs.push(Input::Image {
                data: data.to_owned(),
                mime: mime.to_owned(),
            });
        }
    }
    inputs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_after_a_turn_wait_for_it_and_barge_ins_do_not() {
        let text = |t: &str| Input::Text(t.into());
        let actions = vec![
            (100.0, text("a")),
            (100.5, text("barge in")),
            (103.0, text("after")),
        ];
        let anchored = anchored(actions, &[101.0, 102.0], 100.0);
        assert_eq!(anchored[0].anchor, Anchor::AfterInput { pause: 0.0 });
        assert_eq!(anchored[1].anchor, Anchor::AfterInput { pause: 0.5 });
        assert_eq!(
            anchored[2].anchor,
            Anchor::AfterTurn {
                turns: 2,
                pause: 1.0
            }
        );
        assert_eq!(anchored[2].at, 3.0);
    }
}
