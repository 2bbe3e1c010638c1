//! Media types at the edge: the few a client may send (PCM audio with its rate, the image types
//! the models take), and how a stored artifact is served so that a browser never renders it as a
//! page, whatever type it was stored with.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue};

/// Sample rates a client's `audio/pcm;rate=N` may name.
const RATES: std::ops::RangeInclusive<u32> = 8_000..=48_000;
/// The rate of client PCM whose type names none (ADK's input audio).
const DEFAULT_RATE: u32 = 16_000;
/// Image types a client may send (what Gemini Live and OpenAI Realtime take).
const IMAGE_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];
/// Audio types a browser plays, served inline for the page's player.
const PLAYABLE_AUDIO: [&str; 7] = [
    "audio/wav",
    "audio/mpeg",
    "audio/ogg",
    "audio/webm",
    "audio/mp4",
    "audio/aac",
    "audio/flac",
];
/// The type of an artifact served as bytes to download.
const OPAQUE: &str = "application/octet-stream";
/// Longest type quoted back in an error.
const QUOTED: usize = 64;

/// Why a client's media type is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported mimeType {given:?}: {expected}")]
pub struct MediaTypeError {
    /// The type, cut short.
    given: String,
    /// What would have been taken.
    expected: &'static str,
}

impl MediaTypeError {
    fn new(given: &str, expected: &'static str) -> Self {
        MediaTypeError {
            given: given.chars().take(QUOTED).collect(),
            expected,
        }
    }
}

/// The media type and its parameters, lowercased and trimmed; `None` for any control character
/// (a CR/LF that would split a header) or a malformed parameter.
fn parse(mime: &str) -> Option<(String, Vec<(String, String)>)> {
    if mime.chars().any(char::is_control) {
        return None;
    }
    let mut parts = mime.split(';');
    let kind = parts.next()?.trim().to_ascii_lowercase();
    let params = parts
        .map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((kind, params))
}

/// The rate of `audio/pcm;rate=N` (N in range), or of `audio/pcm` alone; `None` otherwise.
fn pcm_rate(mime: &str) -> Option<u32> {
    let (kind, params) = parse(mime)?;
    if kind != "audio/pcm" {
        return None;
    }
    match params.as_slice() {
        [] => Some(DEFAULT_RATE),
        [(key, rate)] if key == "rate" => rate.parse().ok().filter(|r| RATES.contains(r)),
        _ => None,
    }
}

/// The type of a client's audio: `audio/pcm` with a rate from 8,000 to 48,000 Hz (16,000 when it
/// names none), as `audio/pcm;rate=N`. Anything else (another type, another parameter, a
/// control character) is refused: the type is stored with the recording and served with it.
pub fn client_audio_type(given: Option<&str>) -> Result<String, MediaTypeError> {
    let Some(given) = given else {
        return Ok(format!("audio/pcm;rate={DEFAULT_RATE}"));
    };
    pcm_rate(given)
        .map(|rate| format!("audio/pcm;rate={rate}"))
        .ok_or_else(|| MediaTypeError::new(given, "expected audio/pcm;rate=N (8000 to 48000)"))
}

/// The type of a client's image: `image/jpeg` (when it names none), `image/png` or `image/webp`.
pub fn client_image_type(given: Option<&str>) -> Result<String, MediaTypeError> {
    let Some(given) = given else {
        return Ok(IMAGE_TYPES[0].to_owned());
    };
    match parse(given) {
        Some((kind, params)) if params.is_empty() && IMAGE_TYPES.contains(&kind.as_str()) => {
            Ok(kind)
        }
        _ => Err(MediaTypeError::new(
            given,
            "expected image/jpeg, image/png or image/webp",
        )),
    }
}

/// A client's type for inline data of a turn (`/run`): audio or an image, checked as on the
/// socket.
pub fn client_blob_type(given: &str) -> Result<String, MediaTypeError> {
    if given
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("image/")
    {
        client_image_type(Some(given))
    } else {
        client_audio_type(Some(given))
    }
}

/// What a download of an artifact stored with `stored` is served as: its own type when it is one
/// this gateway knows to be inert (client PCM, the images clients send, audio a browser plays),
/// else opaque bytes.
pub fn served_type(stored: &str) -> String {
    if let Some(rate) = pcm_rate(stored) {
        return format!("audio/pcm;rate={rate}");
    }
    match parse(stored) {
        Some((kind, params))
            if params.is_empty()
                && (IMAGE_TYPES.contains(&kind.as_str())
                    || PLAYABLE_AUDIO.contains(&kind.as_str())) =>
        {
            kind
        }
        _ => OPAQUE.to_owned(),
    }
}

/// The headers of an artifact download served as `served` (from [`served_type`], or `audio/wav`)
/// under the name `name`: never sniffed, never run as a page (a sandbox with no scripts and an
/// opaque origin), and saved rather than shown unless it is audio for the page's player.
pub fn download_headers(served: &str, name: &str) -> HeaderMap {
    let disposition = if PLAYABLE_AUDIO.contains(&served) {
        "inline"
    } else {
        "attachment"
    };
    // A quoted-string of visible ASCII: the name is an artifact name, checked but free text.
    let safe_name: String = name
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect();
    let mut headers = HeaderMap::new();
    let mut put = |name: HeaderName, value: String| {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(name, value);
        }
    };
    put(header::CONTENT_TYPE, served.to_owned());
    put(
        header::CONTENT_DISPOSITION,
        format!("{disposition}; filename=\"{safe_name}\""),
    );
    put(header::X_CONTENT_TYPE_OPTIONS, "nosniff".into());
    put(header::CONTENT_SECURITY_POLICY, "sandbox".into());
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_audio_is_pcm_with_a_rate_and_nothing_else() {
        assert_eq!(client_audio_type(None).unwrap(), "audio/pcm;rate=16000");
        assert_eq!(
            client_audio_type(Some("Audio/PCM; rate=24000")).unwrap(),
            "audio/pcm;rate=24000"
        );
        assert_eq!(
            client_audio_type(Some("audio/pcm")).unwrap(),
            "audio/pcm;rate=16000"
        );
        for bad in [
            "audio/pcm,text/html",
            "text/html",
            "audio/pcm;rate=16000\r\nX-Evil: 1",
            "audio/pcm;rate=1",
            "audio/pcm;rate=16000;charset=utf-8",
            "audio/pcm;rate",
            "audio/wav",
        ] {
            assert!(client_audio_type(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn client_images_are_the_types_the_models_take() {
        assert_eq!(client_image_type(None).unwrap(), "image/jpeg");
        assert_eq!(client_image_type(Some("IMAGE/PNG")).unwrap(), "image/png");
        for bad in ["image/svg+xml", "text/html", "image/png;x=1", "image/png\n"] {
            assert!(client_image_type(Some(bad)).is_err(), "{bad:?}");
        }
        assert_eq!(client_blob_type("image/webp").unwrap(), "image/webp");
        assert!(client_blob_type("text/html").is_err());
    }

    #[test]
    fn downloads_keep_inert_types_and_serve_the_rest_as_bytes() {
        assert_eq!(served_type("audio/pcm;rate=24000"), "audio/pcm;rate=24000");
        assert_eq!(served_type("image/png"), "image/png");
        assert_eq!(served_type("audio/pcm,text/html"), OPAQUE);
        assert_eq!(served_type("text/html"), OPAQUE);
        assert_eq!(served_type("image/svg+xml"), OPAQUE);
        assert_eq!(served_type("a\r\nb"), OPAQUE);
        let wav = download_headers("audio/wav", "a \"b\"\r\n.wav");
        assert_eq!(
            wav[header::CONTENT_DISPOSITION],
            "inline; filename=\"a _b___.wav\""
        );
        assert_eq!(wav[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(wav[header::CONTENT_SECURITY_POLICY], "sandbox");
        let raw = download_headers(OPAQUE, "x");
        assert!(raw[header::CONTENT_DISPOSITION]
            .to_str()
            .unwrap()
            .starts_with("attachment"));
    }
}
