//! What a typed user text asks a tool for, so the offline `sim` model can decide to call one.
//!
//! Matching is deliberately narrow: a missed question just gets the usual echo, while a false
//! hit would answer chit-chat with a tool call. Only the tool's argument is extracted here; the
//! tools themselves validate it (this module must not depend on `agent`).

/// A tool request found in a user's text.
#[derive(Debug, Clone, PartialEq)]
pub enum Intent {
    /// The current time in a place.
    Time {
        /// An IANA zone (`Asia/Tokyo`), `UTC`, or the place as typed when it is not known.
        timezone: String,
    },
    /// An arithmetic expression to evaluate.
    Calculate {
        /// The arithmetic part of the text, e.g. `12 * (3 + 4)`.
        expression: String,
    },
}

/// Finds a time question or an arithmetic request in `text`, if it is one.
pub fn detect(text: &str) -> Option<Intent> {
    // Keyboards on phones type a curly apostrophe in "what’s".
    let text = text.replace('’', "'");
    let text = strip_lead_ins(trim_punctuation(&text));
    time(text).or_else(|| calculate(text))
}

/// Polite openings that carry no meaning for us, longest first.
const LEAD_INS: &[&str] = &[
    "can you tell me",
    "could you tell me",
    "do you know",
    "tell me",
    "can you",
    "could you",
    "please",
    "hey",
];

/// Questions about the time; each must be followed by nothing or by a place.
const TIME_QUESTIONS: &[&str] = &[
    "what time is it",
    "what time it is",
    "what's the current time",
    "what is the current time",
    "whats the current time",
    "what's the local time",
    "what is the local time",
    "what's the time",
    "what is the time",
    "whats the time",
];

/// Bare mentions of the time; only "in" may follow, so "time for bed" is not a question.
const TIME_NOUNS: &[&str] = &[
    "the current time",
    "current time",
    "the local time",
    "local time",
    "the time",
    "time",
];

/// Words around a place that do not change the answer.
const FILLERS: &[&str] = &["right now", "now", "currently", "please", "exactly"];

/// Ways of asking for a calculation.
const CALC_PHRASES: &[&str] = &[
    "what is",
    "what's",
    "whats",
    "how much is",
    "calculate",
    "compute",
    "evaluate",
];

/// Constants and functions the calculator knows (kept in step with `agent::builtin::calculate`).
const CALC_NAMES: &[&str] = &[
    "pi", "e", "sqrt", "abs", "round", "floor", "ceil", "ln", "log10", "log", "exp", "sin", "cos",
    "tan", "min", "max",
];

/// Places people ask about, lowercase, with their IANA zone.
const PLACES: &[(&str, &str)] = &[
    ("utc", "UTC"),
    ("gmt", "UTC"),
    ("tokyo", "Asia/Tokyo"),
    ("japan", "Asia/Tokyo"),
    ("new york", "America/New_York"),
    ("new york city", "America/New_York"),
    ("nyc", "America/New_York"),
    ("boston", "America/New_York"),
    ("miami", "America/New_York"),
    ("london", "Europe/London"),
    ("uk", "Europe/London"),
    ("england", "Europe/London"),
    ("dublin", "Europe/Dublin"),
    ("lisbon", "Europe/Lisbon"),
    ("paris", "Europe/Paris"),
    ("france", "Europe/Paris"),
    ("berlin", "Europe/Berlin"),
    ("germany", "Europe/Berlin"),
    ("amsterdam", "Europe/Amsterdam"),
    ("madrid", "Europe/Madrid"),
    ("spain", "Europe/Madrid"),
    ("rome", "Europe/Rome"),
    ("italy", "Europe/Rome"),
    ("zurich", "Europe/Zurich"),
    ("stockholm", "Europe/Stockholm"),
    ("athens", "Europe/Athens"),
    ("istanbul", "Europe/Istanbul"),
    ("moscow", "Europe/Moscow"),
    ("beijing", "Asia/Shanghai"),
    ("shanghai", "Asia/Shanghai"),
    ("china", "Asia/Shanghai"),
    ("hong kong", "Asia/Hong_Kong"),
    ("singapore", "Asia/Singapore"),
    ("seoul", "Asia/Seoul"),
    ("korea", "Asia/Seoul"),
    ("bangkok", "Asia/Bangkok"),
    ("jakarta", "Asia/Jakarta"),
    ("manila", "Asia/Manila"),
    ("mumbai", "Asia/Kolkata"),
    ("delhi", "Asia/Kolkata"),
    ("new delhi", "Asia/Kolkata"),
    ("bangalore", "Asia/Kolkata"),
    ("india", "Asia/Kolkata"),
    ("karachi", "Asia/Karachi"),
    ("dubai", "Asia/Dubai"),
    ("tehran", "Asia/Tehran"),
    ("sydney", "Australia/Sydney"),
    ("melbourne", "Australia/Melbourne"),
    ("auckland", "Pacific/Auckland"),
    ("new zealand", "Pacific/Auckland"),
    ("honolulu", "Pacific/Honolulu"),
    ("hawaii", "Pacific/Honolulu"),
    ("los angeles", "America/Los_Angeles"),
    ("la", "America/Los_Angeles"),
    ("san francisco", "America/Los_Angeles"),
    ("seattle", "America/Los_Angeles"),
    ("vancouver", "America/Vancouver"),
    ("chicago", "America/Chicago"),
    ("denver", "America/Denver"),
    ("toronto", "America/Toronto"),
    ("mexico city", "America/Mexico_City"),
    ("são paulo", "America/Sao_Paulo"),
    ("sao paulo", "America/Sao_Paulo"),
    ("brazil", "America/Sao_Paulo"),
    ("buenos aires", "America/Argentina/Buenos_Aires"),
    ("cairo", "Africa/Cairo"),
    ("egypt", "Africa/Cairo"),
    ("johannesburg", "Africa/Johannesburg"),
    ("south africa", "Africa/Johannesburg"),
    ("lagos", "Africa/Lagos"),
    ("nigeria", "Africa/Lagos"),
    ("nairobi", "Africa/Nairobi"),
    ("kenya", "Africa/Nairobi"),
];

fn time(text: &str) -> Option<Intent> {
    let find = |phrases: &[&str]| {
        phrases
            .iter()
            .find_map(|phrase| strip_word_prefix(text, phrase))
    };
    let (rest, prepositions): (_, &[&str]) = match find(TIME_QUESTIONS) {
        Some(rest) => (rest, &["in", "at", "for", "on"]),
        None => (find(TIME_NOUNS)?, &["in"]),
    };
    let rest = strip_fillers(rest);
    if rest.is_empty() {
        return Some(time_in("UTC"));
    }
    let place = prepositions
        .iter()
        .find_map(|word| strip_word_prefix(rest, word))?;
    let place = trim_punctuation(place);
    if place.is_empty() {
        return Some(time_in("UTC"));
    }
    Some(time_in(&zone_for(place)))
}

fn time_in(timezone: &str) -> Intent {
    Intent::Time {
        timezone: timezone.to_string(),
    }
}

/// The zone for a place: an explicit IANA name as is, a known place from the table, otherwise
/// the place itself so the tool can say it does not know it.
fn zone_for(place: &str) -> String {
    if place.contains('/') {
        return place.to_string();
    }
    let key = place.to_lowercase();
    let key = key.strip_prefix("the ").unwrap_or(&key);
    // "Tokyo, Japan" is found by its city.
    let city = key.split(',').next().unwrap_or(key).trim();
    PLACES
        .iter()
        .find(|(name, _)| *name == key || *name == city)
        .map_or_else(|| place.to_string(), |(_, zone)| zone.to_string())
}

fn calculate(text: &str) -> Option<Intent> {
    let expression = CALC_PHRASES
        .iter()
        .find_map(|phrase| strip_word_prefix(text, phrase))
        .unwrap_or(text);
    let expression = trim_punctuation(expression);
    is_arithmetic(expression).then(|| Intent::Calculate {
        expression: expression.to_string(),
    })
}

/// True for arithmetic only (numbers, operators, parentheses, known names) with at least one
/// binary operator or function call, so "42" or "I have 3 cats" do not count.
fn is_arithmetic(s: &str) -> bool {
    let chars: Vec<char> = s.chars().collect();
    let (mut i, mut after_operand, mut has_work) = (0, false, false);
    while let Some(&c) = chars.get(i) {
        match c {
            c if c.is_whitespace() || c == ',' => {}
            '(' => after_operand = false,
            ')' => after_operand = true,
            '+' | '-' | '*' | '/' | '%' | '^' | '×' | '÷' => {
                has_work |= after_operand;
                after_operand = false;
            }
            '0'..='9' | '.' => {
                i = skip_number(&chars, i);
                after_operand = true;
                continue;
            }
            c if c.is_ascii_alphabetic() => {
                let end = scan(&chars, i, |c| c.is_ascii_alphanumeric() || c == '_');
                let name = chars[i..end]
                    .iter()
                    .collect::<String>()
                    .to_ascii_lowercase();
                if !CALC_NAMES.contains(&name.as_str()) {
                    return false;
                }
                let next = scan(&chars, end, char::is_whitespace);
                let is_call = chars.get(next) == Some(&'(');
                has_work |= is_call && name != "pi" && name != "e";
                after_operand = !is_call;
                i = end;
                continue;
            }
            _ => return false,
        }
        i += 1;
    }
    has_work && after_operand
}

/// Index just past the number (with an optional exponent) starting at `i`.
fn skip_number(chars: &[char], i: usize) -> usize {
    let end = scan(chars, i, |c| c.is_ascii_digit() || c == '.');
    if !matches!(chars.get(end), Some('e' | 'E')) {
        return end;
    }
    let sign = usize::from(matches!(chars.get(end + 1), Some('+' | '-')));
    let digits = scan(chars, end + 1 + sign, |c| c.is_ascii_digit());
    if digits > end + 1 + sign {
        digits
    } else {
        end
    }
}

fn scan(chars: &[char], mut i: usize, keep: impl Fn(char) -> bool) -> usize {
    while chars.get(i).is_some_and(|&c| keep(c)) {
        i += 1;
    }
    i
}

fn strip_lead_ins(mut text: &str) -> &str {
    while let Some(rest) = LEAD_INS
        .iter()
        .find_map(|word| strip_word_prefix(text, word))
    {
        text = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
    }
    text
}

fn strip_fillers(mut text: &str) -> &str {
    loop {
        let stripped = FILLERS.iter().find_map(|word| {
            strip_word_prefix(text, word).or_else(|| strip_word_suffix(text, word))
        });
        match stripped {
            Some(rest) => text = rest.trim_matches(|c: char| c == ',' || c.is_whitespace()),
            None => return text,
        }
    }
}

/// `text` without a leading `word` (any ASCII case) that stands alone, trimmed.
fn strip_word_prefix<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let head = text.get(..word.len())?;
    let rest = text.get(word.len()..)?;
    let boundary = rest.chars().next().is_none_or(|c| !c.is_alphanumeric());
    (head.eq_ignore_ascii_case(word) && boundary).then(|| rest.trim())
}

/// `text` without a trailing `word` (any ASCII case) that stands alone, trimmed.
fn strip_word_suffix<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let split = text.len().checked_sub(word.len())?;
    let (rest, tail) = (text.get(..split)?, text.get(split..)?);
    let boundary = rest
        .chars()
        .next_back()
        .is_none_or(|c| !c.is_alphanumeric());
    (tail.eq_ignore_ascii_case(word) && boundary).then(|| rest.trim())
}

/// Trims whitespace and the sentence's closing punctuation (`?`, `.`, `!`, `=`).
fn trim_punctuation(text: &str) -> &str {
    text.trim()
        .trim_end_matches(|c: char| matches!(c, '?' | '.' | '!' | '=') || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time_at(zone: &str) -> Option<Intent> {
        Some(time_in(zone))
    }

    fn calc(expression: &str) -> Option<Intent> {
        Some(Intent::Calculate {
            expression: expression.to_string(),
        })
    }

    #[test]
    fn time_questions() {
        let cases = [
            ("what time is it", "UTC"),
            ("What time is it?", "UTC"),
            ("what time is it now?", "UTC"),
            ("time", "UTC"),
            ("what's the time in Tokyo?", "Asia/Tokyo"),
            ("what’s the time in tokyo", "Asia/Tokyo"),
            ("What time is it in New York", "America/New_York"),
            ("what time is it in NYC right now?", "America/New_York"),
            ("current time in paris", "Europe/Paris"),
            ("time in London please", "Europe/London"),
            ("what is the time in Asia/Kolkata", "Asia/Kolkata"),
            (
                "what is the current time in São Paulo?",
                "America/Sao_Paulo",
            ),
            (
                "Hey, can you tell me the time in Sydney",
                "Australia/Sydney",
            ),
            ("do you know what time it is in LA", "America/Los_Angeles"),
            ("what time is it in Tokyo, Japan?", "Asia/Tokyo"),
            ("what time is it in the UK", "Europe/London"),
            ("what's the time in utc", "UTC"),
            ("local time in Mumbai", "Asia/Kolkata"),
            ("WHAT TIME IS IT IN BERLIN", "Europe/Berlin"),
        ];
        for (text, zone) in cases {
            assert_eq!(detect(text), time_at(zone), "{text:?}");
        }
    }

    #[test]
    fn unknown_places_pass_through_as_typed() {
        assert_eq!(detect("what time is it on Mars?"), time_at("Mars"));
        assert_eq!(detect("time in  Middle Earth. "), time_at("Middle Earth"));
    }

    #[test]
    fn every_place_resolves_to_a_plausible_zone() {
        for (place, zone) in PLACES {
            assert_eq!(
                detect(&format!("time in {place}")),
                time_at(zone),
                "{place}"
            );
            assert!(zone.contains('/') || *zone == "UTC", "{zone}");
        }
    }

    #[test]
    fn calculations() {
        let cases = [
            ("what is 12 * (3 + 4)?", "12 * (3 + 4)"),
            ("what's 2^10", "2^10"),
            ("calculate 17 * 23", "17 * 23"),
            ("compute sqrt(2)", "sqrt(2)"),
            ("how much is 10 / 4", "10 / 4"),
            ("2 + 2", "2 + 2"),
            ("2 + 2 =", "2 + 2"),
            ("evaluate 3 × 4", "3 × 4"),
            ("Please calculate 1e3 / 8.", "1e3 / 8"),
            ("what is -2 ** 2 + max(1, 2)", "-2 ** 2 + max(1, 2)"),
            ("What is PI * 2", "PI * 2"),
            ("can you compute Sqrt (9)", "Sqrt (9)"),
        ];
        for (text, expression) in cases {
            assert_eq!(detect(text), calc(expression), "{text:?}");
        }
    }

    #[test]
    fn not_tool_requests() {
        let cases = [
            "",
            "hello",
            "I have 3 cats",
            "tell me about time travel",
            "what is love",
            "what is the time difference between us",
            "time flies",
            "time for bed",
            "the time machine",
            "timeout",
            "what's up?",
            "42",
            "-5",
            "+1",
            "100%",
            "calculate my taxes",
            "what is 2 + 2 in binary",
            "e",
            "pi()",
            ":-)",
        ];
        for text in cases {
            assert_eq!(detect(text), None, "{text:?}");
        }
    }
}
