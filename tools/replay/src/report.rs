//! A replay's report: per session and per turn, the checks then against now; as a terminal
//! table, JSON, JUnit XML (one test case per turn, for CI) and an HTML page listing the turns
//! that differ with both transcripts and players for both answers' audio.

use base64::Engine;
use serde::Serialize;

use crate::compare::Check;
use crate::turns::Turn;

/// Most seconds of audio each player in the HTML page holds.
const MAX_PLAYER_SECONDS: usize = 30;

/// One turn: the input, then, now, the checks.
#[derive(Debug, Clone, Serialize)]
pub struct TurnReport {
    /// 1-based.
    pub index: usize,
    /// What the user sent.
    pub input: String,
    /// The recorded call.
    pub then: Turn,
    /// The replay.
    pub now: Turn,
    /// The checks.
    pub checks: Vec<Check>,
    /// The answer's audio then, PCM16 (not in the JSON).
    #[serde(skip)]
    pub then_audio: Option<(Vec<u8>, u32)>,
    /// The answer's audio now, PCM16 (not in the JSON).
    #[serde(skip)]
    pub now_audio: Option<(Vec<u8>, u32)>,
}

impl TurnReport {
    /// Every check holds.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

/// One replayed session.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionReport {
    /// The bundle's folder.
    pub bundle: String,
    /// The recorded session.
    pub session_id: String,
    /// The replay's session on the target.
    pub replay_session_id: String,
    /// The recorded call's length, first input to last event, in ms.
    pub original_ms: f64,
    /// The replay's length, first input to the last turn's end, in ms.
    pub replay_ms: f64,
    /// Per input.
    pub turns: Vec<TurnReport>,
    /// What went wrong on the way.
    pub problems: Vec<String>,
}

impl SessionReport {
    /// No difference and no problem.
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && self.turns.iter().all(TurnReport::passed)
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// What ran it.
    pub livegate: String,
    /// The target's WebSocket base.
    pub target: String,
    /// The speed.
    pub speed: f64,
    /// Per session.
    pub sessions: Vec<SessionReport>,
    /// Checks over all sessions (time to first audio).
    pub run_checks: Vec<Check>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Report {
    /// Every session passed and every run check holds.
    pub fn passed(&self) -> bool {
        self.sessions.iter().all(SessionReport::passed) && self.run_checks.iter().all(|c| c.passed)
    }

    /// The failed checks, as `session turn N: name: then → now` lines.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.sessions {
            for p in &s.problems {
                out.push(format!("{}: {p}", s.session_id));
            }
            for t in &s.turns {
                for c in t.checks.iter().filter(|c| !c.passed) {
                    out.push(format!(
                        "{} turn {}: {}: {} → {}",
                        s.session_id, t.index, c.name, c.then, c.now
                    ));
                }
            }
        }
        for c in self.run_checks.iter().filter(|c| !c.passed) {
            out.push(format!("{}: {} → {}", c.name, c.then, c.now));
        }
        out
    }

    /// The terminal table: a line per turn, then each difference.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<24} {:>4}  {:<28} {:<6} {:>9} {:>9}\n",
            "session", "turn", "input", "result", "audio then", "audio now"
        );
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} ms"));
        for s in &self.sessions {
            for t in &s.turns {
                out.push_str(&format!(
                    "{:<24} {:>4}  {:<28} {:<6} {:>9} {:>9}\n",
                    crate::script::short(&s.session_id, 24),
                    t.index,
                    crate::script::short(&t.input, 28),
                    if t.passed() { "same" } else { "DIFF" },
                    ms(t.then.first_audio_ms),
                    ms(t.now.first_audio_ms),
                ));
            }
            out.push_str(&format!(
                "{:<24} length {:.1} s then, {:.1} s now (speed {})\n",
                "",
                s.original_ms / 1000.0,
                s.replay_ms / 1000.0,
                self.speed
            ));
        }
        let failures = self.failures();
        if failures.is_empty() {
            out.push_str(&format!(
                "{} sessions, {} turns: no differences\n",
                self.sessions.len(),
                self.sessions.iter().map(|s| s.turns.len()).sum::<usize>()
            ));
        } else {
            out.push_str(&format!("{} differences:\n", failures.len()));
            for f in failures {
                out.push_str(&format!("  {f}\n"));
            }
        }
        out
    }

    /// The JSON report.
    pub fn json(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        value["passed"] = self.passed().into();
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }

    /// JUnit XML: a suite per session, a case per turn, a failure per failed check.
    pub fn junit(&self) -> String {
        let mut out = String::from(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"livegate replay\">\n",
        );
        for s in &self.sessions {
            let failed = s.turns.iter().filter(|t| !t.passed()).count() + s.problems.len();
            out.push_str(&format!(
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" time=\"{:.3}\">\n",
                escape(&s.session_id),
                s.turns.len() + s.problems.len(),
                s.replay_ms / 1000.0
            ));
            for t in &s.turns {
                out.push_str(&format!(
                    "    <testcase classname=\"{}\" name=\"turn {} {}\">\n",
                    escape(&s.session_id),
                    t.index,
                    escape(&t.input)
                ));
                for c in t.checks.iter().filter(|c| !c.passed) {
                    out.push_str(&format!(
                        "      <failure message=\"{}\">then: {}\nnow: {}</failure>\n",
                        escape(&c.name),
                        escape(&c.then),
                        escape(&c.now)
                    ));
                }
                out.push_str("    </testcase>\n");
            }
            for p in &s.problems {
                out.push_str(&format!(
                    "    <testcase classname=\"{}\" name=\"replay\"><failure message=\"{}\"/></testcase>\n",
                    escape(&s.session_id),
                    escape(p)
                ));
            }
            out.push_str("  </testsuite>\n");
        }
        if !self.run_checks.is_empty() {
            out.push_str(&format!(
                "  <testsuite name=\"run\" tests=\"{}\">\n",
                self.run_checks.len()
            ));
            for c in &self.run_checks {
                out.push_str(&format!("    <testcase name=\"{}\">", escape(&c.name)));
                if !c.passed {
                    out.push_str(&format!(
                        "<failure message=\"{}\">then: {}\nnow: {}</failure>",
                        escape(&c.name),
                        escape(&c.then),
                        escape(&c.now)
                    ));
                }
                out.push_str("</testcase>\n");
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }

    /// A readable page: a summary, then each differing turn with both transcripts and both
    /// answers' audio.
    pub fn html(&self) -> String {
        let mut out = String::from(concat!(
            "<!doctype html><meta charset=\"utf-8\"><title>livegate replay</title>\n",
            "<style>body{font:15px system-ui,sans-serif;margin:2em;max-width:70em}",
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;",
            "vertical-align:top;text-align:left}.fail{color:#b00020}.ok{color:#137333}",
            "section{border:1px solid #ddd;border-radius:6px;padding:1em;margin:1em 0}</style>\n"
        ));
        let failures = self.failures();
        out.push_str(&format!(
            "<h1>livegate replay</h1><p>Target {}, speed {}: <b class=\"{}\">{}</b></p>\n",
            escape(&self.target),
            self.speed,
            if failures.is_empty() { "ok" } else { "fail" },
            if failures.is_empty() {
                "no differences".to_owned()
            } else {
                format!("{} differences", failures.len())
            }
        ));
        for c in &self.run_checks {
            out.push_str(&format!(
                "<p class=\"{}\">{}: then {}, now {}</p>\n",
                if c.passed { "ok" } else { "fail" },
                escape(&c.name),
                escape(&c.then),
                escape(&c.now)
            ));
        }
        for s in &self.sessions {
            out.push_str(&format!(
                "<h2>{}</h2><p>{} turns; {:.1} s then, {:.1} s now; replayed as {}</p>\n",
                escape(&s.session_id),
                s.turns.len(),
                s.original_ms / 1000.0,
                s.replay_ms / 1000.0,
                escape(&s.replay_session_id)
            ));
            for p in &s.problems {
                out.push_str(&format!("<p class=\"fail\">{}</p>\n", escape(p)));
            }
            for t in s.turns.iter().filter(|t| !t.passed()) {
                out.push_str(&turn_html(t));
            }
        }
        out
    }
}

fn turn_html(t: &TurnReport) -> String {
    let mut out = format!(
        "<section><h3>Turn {}: {}</h3><table><tr><th></th><th>then</th><th>now</th></tr>\n",
        t.index,
        escape(&t.input)
    );
    let transcript = |turn: &Turn| {
        escape(
            &format!("{}\n{}", turn.heard, turn.text)
                .trim()
                .replace('\n', " — "),
        )
    };
    out.push_str(&format!(
        "<tr><td>transcript</td><td>{}</td><td>{}</td></tr>\n",
        transcript(&t.then),
        transcript(&t.now)
    ));
    out.push_str(&format!(
        "<tr><td>audio</td><td>{}</td><td>{}</td></tr>\n",
        player(t.then_audio.as_ref()),
        player(t.now_audio.as_ref())
    ));
    for c in &t.checks {
        out.push_str(&format!(
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            if c.passed { "ok" } else { "fail" },
            escape(&c.name),
            escape(&c.then),
            escape(&c.now)
        ));
    }
    out.push_str("</table></section>\n");
    out
}

/// An `<audio>` player with the PCM as a WAV data URI, or a dash.
fn player(audio: Option<&(Vec<u8>, u32)>) -> String {
    let Some((pcm, rate)) = audio.filter(|(pcm, _)| !pcm.is_empty()) else {
        return "-".into();
    };
    let cap = MAX_PLAYER_SECONDS * *rate as usize * 2;
    let wav = wav(&pcm[..pcm.len().min(cap)], *rate);
    let data = base64::engine::general_purpose::STANDARD.encode(wav);
    format!("<audio controls preload=\"none\" src=\"data:audio/wav;base64,{data}\"></audio>")
}

/// PCM16 mono as a WAV file.
pub fn wav(pcm: &[u8], rate: u32) -> Vec<u8> {
    let data = &pcm[..pcm.len() - pcm.len() % 2];
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX - 36);
    let mut out = Vec::with_capacity(44 + data.len());
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(data);
    out
}
