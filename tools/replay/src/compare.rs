//! Then against now: the rules (a small TOML file) and the checks of each turn and of the whole
//! run. A check that fails is a difference; any failed check fails the run.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::turns::{ToolCall, Turn};

/// What must hold between the recorded call and its replay (`--rules FILE`, TOML). Every key is
/// optional; the defaults are below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rules {
    /// Tool calls, names and arguments, in order, must match (default true).
    pub tool_calls: bool,
    /// Transfers to other agents must match (default true).
    pub transfers: bool,
    /// An answer interrupted then must be interrupted now, and only then (default true).
    pub interrupted: bool,
    /// Error events must match by code (default true).
    pub errors: bool,
    /// Each turn's text (answer and transcription) must be at least this similar, 0 to 1 (1:
    /// exact; 0: not checked). Default 0.8.
    pub text_similarity: f64,
    /// Now's 95th percentile of time to first audio may be at most this fraction above then's
    /// (0.2: 20 %); absent: not checked.
    pub first_audio_p95_growth: Option<f64>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            tool_calls: true,
            transfers: true,
            interrupted: true,
            errors: true,
            text_similarity: 0.8,
            first_audio_p95_growth: None,
        }
    }
}

/// Why the rules cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("rules {path}: {reason}")]
pub struct RulesError {
    path: String,
    reason: String,
}

impl Rules {
    /// Reads a rules file.
    pub fn load(path: &Path) -> Result<Rules, RulesError> {
        let error = |reason: String| RulesError {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        let rules: Rules = toml::from_str(&text).map_err(|e| error(e.to_string()))?;
        if !(0.0..=1.0).contains(&rules.text_similarity) {
            return Err(error("text_similarity must be from 0 to 1".into()));
        }
        if rules.first_audio_p95_growth.is_some_and(|g| g < 0.0) {
            return Err(error("first_audio_p95_growth must not be negative".into()));
        }
        Ok(rules)
    }
}

/// One comparison: what it is, then, now, and whether it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// `tool_calls`, `transfers`, `text`, `interrupted`, `errors`, `turn`, `first_audio_p95`.
    pub name: String,
    /// The recorded call's side.
    pub then: String,
    /// The replay's side.
    pub now: String,
    /// It holds.
    pub passed: bool,
}

fn check(name: &str, then: String, now: String, passed: bool) -> Check {
    Check {
        name: name.into(),
        then,
        now,
        passed,
    }
}

fn calls(calls: &[ToolCall]) -> String {
    if calls.is_empty() {
        return "none".into();
    }
    calls
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// How alike two texts are, 0 to 1 (normalised Levenshtein over characters, case and spacing
/// ignored).
pub fn similarity(a: &str, b: &str) -> f64 {
    let norm = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    strsim::normalized_levenshtein(&norm(a), &norm(b))
}

/// The checks of one turn under `rules`.
pub fn turn_checks(rules: &Rules, then: &Turn, now: &Turn) -> Vec<Check> {
    let mut checks = Vec::new();
    if then.complete && !now.complete {
        checks.push(check("turn", "ended".into(), "did not end".into(), false));
    }
    if rules.tool_calls {
        checks.push(check(
            "tool_calls",
            calls(&then.tool_calls),
            calls(&now.tool_calls),
            then.tool_calls == now.tool_calls,
        ));
    }
    if rules.transfers {
        checks.push(check(
            "transfers",
            list(&then.transfers),
            list(&now.transfers),
            then.transfers == now.transfers,
        ));
    }
    if rules.text_similarity > 0.0 {
        let then_text = format!("{} {}", then.heard, then.text);
        let now_text = format!("{} {}", now.heard, now.text);
        let score = similarity(&then_text, &now_text);
        checks.push(check(
            "text",
            then_text.trim().to_owned(),
            format!("{} (similarity {score:.2})", now_text.trim()),
            score + 1e-9 >= rules.text_similarity,
        ));
    }
    if rules.interrupted {
        checks.push(check(
            "interrupted",
            then.interrupted.to_string(),
            now.interrupted.to_string(),
            then.interrupted == now.interrupted,
        ));
    }
    if rules.errors {
        let codes = |t: &Turn| {
            t.errors
                .iter()
                .map(|e| e.split(':').next().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        };
        checks.push(check(
            "errors",
            list(&then.errors),
            list(&now.errors),
            codes(then) == codes(now),
        ));
    }
    checks
}

/// The `p`-th percentile (0–100) of `values`, nearest rank.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The run-wide check of time to first audio, when the rules ask for it and both sides have
/// some.
pub fn first_audio_check(rules: &Rules, then: &[f64], now: &[f64]) -> Option<Check> {
    let growth = rules.first_audio_p95_growth?;
    let (Some(then), Some(now)) = (percentile(then, 95.0), percentile(now, 95.0)) else {
        return None;
    };
    Some(check(
        "first_audio_p95",
        format!("{then:.0} ms"),
        format!("{now:.0} ms (limit {:.0} ms)", then * (1.0 + growth)),
        now <= then * (1.0 + growth),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_changed_tool_call_fails_and_close_text_passes() {
        let then = Turn {
            tool_calls: vec![ToolCall {
                name: "calc".into(),
                args: json!({"e": "1"}),
            }],
            text: "It is 10:01 in Tokyo.".into(),
            complete: true,
            ..Turn::default()
        };
        let mut now = then.clone();
        now.text = "It is 10:02 in Tokyo.".into();
        let rules = Rules::default();
        assert!(turn_checks(&rules, &then, &now).iter().all(|c| c.passed));
        now.tool_calls[0].args = json!({"e": "2"});
        let failed: Vec<_> = turn_checks(&rules, &then, &now)
            .into_iter()
            .filter(|c| !c.passed)
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].name, "tool_calls");
        assert!(failed[0].now.contains(r#"calc({"e":"2"})"#));
    }

    #[test]
    fn first_audio_growth_is_bounded_by_the_rule() {
        let rules = Rules {
            first_audio_p95_growth: Some(0.2),
            ..Rules::default()
        };
        let then = [100.0, 200.0, 300.0];
        assert!(
            first_audio_check(&rules, &then, &[300.0, 350.0])
                .unwrap()
                .passed
        );
        assert!(!first_audio_check(&rules, &then, &[400.0]).unwrap().passed);
        assert!(first_audio_check(&Rules::default(), &then, &[400.0]).is_none());
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.0));
    }

    #[test]
    fn rules_parse_with_defaults_and_refuse_unknown_keys() {
        let rules: Rules = toml::from_str("text_similarity = 1.0").unwrap();
        assert!(rules.tool_calls && rules.text_similarity == 1.0);
        assert!(toml::from_str::<Rules>("tool_call = true").is_err());
    }
}
