//! A replay bundle on disk (docs/REPLAY.md, "The bundle"): a folder with `bundle.json`,
//! `events.jsonl` and `recordings/`. Reading one checks every file `bundle.json` lists (present,
//! its size, its SHA-256) and names the one that is not right. Also: unpacking the tar the
//! gateway's export serves into such a folder, and writing one (tests, hand-made calls).

use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The format's name in `bundle.json`.
pub const FORMAT: &str = "livegate-replay-bundle";
/// The newest version this reader knows.
pub const VERSION: u64 = 1;
/// Largest bundle read (as the gateway's export limit).
pub const MAX_BUNDLE_BYTES: u64 = 512 * 1024 * 1024;

/// Why a bundle cannot be used; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file is missing.
    #[error("bundle {bundle}: {file} is missing")]
    Missing {
        /// The bundle's folder.
        bundle: String,
        /// The file.
        file: String,
    },
    /// A file is there but not what `bundle.json` says, or not readable as its kind.
    #[error("bundle {bundle}: {file} is corrupted: {reason}")]
    Corrupt {
        /// The bundle's folder.
        bundle: String,
        /// The file.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or writing failed.
    #[error("bundle {bundle}: {file}: {source}")]
    Io {
        /// The bundle's folder.
        bundle: String,
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

/// One file `bundle.json` lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    /// Relative path in the bundle.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Hex SHA-256.
    pub sha256: String,
    /// A recording's mime type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// A recording's side: `input` (the user's) or `output` (the agent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<String>,
    /// A recording's start (Unix seconds), as its `fileData` event's timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<f64>,
}

/// `bundle.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`] or older.
    pub version: u64,
    /// The app the session belonged to.
    #[serde(default)]
    pub app_name: String,
    /// The session's user.
    pub user_id: String,
    /// The session's id.
    pub session_id: String,
    /// The session's state when exported (no `temp:` keys).
    #[serde(default)]
    pub state: Map<String, Value>,
    /// What wrote it.
    #[serde(default)]
    pub exported_by: String,
    /// Every other file.
    pub files: Vec<FileEntry>,
}

/// A recording of a bundle, read.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Its path in the bundle (`recordings/…`).
    pub path: String,
    /// `input` or `output`.
    pub side: String,
    /// Its start, Unix seconds.
    pub started: f64,
    /// PCM16 mono.
    pub pcm: Bytes,
    /// Its sample rate.
    pub rate: u32,
}

/// A bundle, read and checked.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Its folder.
    pub dir: PathBuf,
    /// `bundle.json`.
    pub manifest: Manifest,
    /// `events.jsonl`, in order.
    pub events: Vec<Value>,
    /// Its recordings, by start.
    pub recordings: Vec<Recording>,
}

/// The rate a PCM mime type names (`audio/pcm;rate=24000`), else `default`.
pub fn pcm_rate(mime: &str, default: u32) -> u32 {
    mime.split(';')
        .filter_map(|p| p.trim().strip_prefix("rate="))
        .find_map(|r| r.parse().ok())
        .unwrap_or(default)
}

/// Hex SHA-256.
pub fn sha256(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A relative path inside the bundle, with no way out of it.
fn inside(path: &str) -> bool {
    let path = Path::new(path);
    !path.as_os_str().is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

impl Bundle {
    /// Reads the bundle in `dir`, checking every file.
    pub fn open(dir: &Path) -> Result<Bundle, BundleError> {
        let name = dir.display().to_string();
        let corrupt = |file: &str, reason: String| BundleError::Corrupt {
            bundle: name.clone(),
            file: file.to_owned(),
            reason,
        };
        let manifest_bytes = read(dir, "bundle.json", MAX_BUNDLE_BYTES)?;
        let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| corrupt("bundle.json", e.to_string()))?;
        if manifest.format != FORMAT {
            return Err(corrupt(
                "bundle.json",
                format!("format is {:?}, not {FORMAT:?}", manifest.format),
            ));
        }
        if manifest.version > VERSION {
            return Err(corrupt(
                "bundle.json",
                format!(
                    "version {} is newer than this replay reads ({VERSION}): update livegate",
                    manifest.version
                ),
            ));
        }
        let total: u64 = manifest.files.iter().map(|f| f.bytes).sum();
        if total > MAX_BUNDLE_BYTES {
            return Err(corrupt(
                "bundle.json",
                format!("its files add up to {total} bytes, over {MAX_BUNDLE_BYTES}"),
            ));
        }
        let mut events = None;
        let mut recordings = Vec::new();
        for entry in &manifest.files {
            if !inside(&entry.path) {
                return Err(corrupt(
                    "bundle.json",
                    format!("{:?} is not a path inside the bundle", entry.path),
                ));
            }
            let data = read(dir, &entry.path, entry.bytes)?;
            if data.len() as u64 != entry.bytes {
                return Err(corrupt(
                    &entry.path,
                    format!("{} bytes, bundle.json says {}", data.len(), entry.bytes),
                ));
            }
            if sha256(&data) != entry.sha256 {
                return Err(corrupt(
                    &entry.path,
                    "its SHA-256 is not the one bundle.json gives".into(),
                ));
            }
            if entry.path == "events.jsonl" {
                events =
                    Some(parse_events(&data).map_err(|r| corrupt(&entry.path, r.to_string()))?);
            } else if let Some(side) = &entry.side {
                let mime = entry.mime_type.as_deref().unwrap_or("audio/pcm");
                let default_rate = if side == "input" { 16_000 } else { 24_000 };
                recordings.push(Recording {
                    path: entry.path.clone(),
                    side: side.clone(),
                    started: entry.started.unwrap_or_default(),
                    pcm: Bytes::from(data),
                    rate: pcm_rate(mime, default_rate),
                });
            }
        }
        let events = events.ok_or_else(|| BundleError::Missing {
            bundle: name.clone(),
            file: "events.jsonl (in bundle.json's files)".into(),
        })?;
        recordings.sort_by(|a, b| a.started.total_cmp(&b.started));
        Ok(Bundle {
            dir: dir.to_owned(),
            manifest,
            events,
            recordings,
        })
    }

    /// The recording at `path`.
    pub fn recording(&self, path: &str) -> Option<&Recording> {
        self.recordings.iter().find(|r| r.path == path)
    }
}

/// Reads `file` of the bundle in `dir`, refusing one over `limit` bytes (plus one, so a size
/// mismatch is still told as such).
fn read(dir: &Path, file: &str, limit: u64) -> Result<Vec<u8>, BundleError> {
    use std::io::Read;
    let bundle = dir.display().to_string();
    let opened = std::fs::File::open(dir.join(file));
    let handle = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BundleError::Missing {
                bundle,
                file: file.to_owned(),
            })
        }
        Err(source) => {
            return Err(BundleError::Io {
                bundle,
                file: file.to_owned(),
                source,
            })
        }
    };
    let mut data = Vec::new();
    handle
        .take(limit.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|source| BundleError::Io {
            bundle,
            file: file.to_owned(),
            source,
        })?;
    Ok(data)
}

/// Why `events.jsonl` cannot be read.
#[derive(Debug, thiserror::Error)]
enum BadEvents {
    #[error("not UTF-8: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
    #[error("line {0}: not a JSON object")]
    NotObject(usize),
    #[error("line {line}: {source}")]
    Json {
        line: usize,
        source: serde_json::Error,
    },
}

/// One JSON object a line; the first bad line named.
fn parse_events(data: &[u8]) -> Result<Vec<Value>, BadEvents> {
    let text = std::str::from_utf8(data)?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| match serde_json::from_str::<Value>(line) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) => Err(BadEvents::NotObject(n + 1)),
            Err(source) => Err(BadEvents::Json {
                line: n + 1,
                source,
            }),
        })
        .collect()
}

/// Writes a bundle into `dir`: `events` as `events.jsonl`, each recording under `recordings/`,
/// and `bundle.json` listing them with sizes and hashes.
pub fn write(
    dir: &Path,
    user_id: &str,
    session_id: &str,
    events: &[Value],
    recordings: &[(String, &str, f64, &[u8])],
) -> Result<(), BundleError> {
    let bundle = dir.display().to_string();
    let io = |file: &str| {
        let bundle = bundle.clone();
        let file = file.to_owned();
        move |source| BundleError::Io {
            bundle,
            file,
            source,
        }
    };
    std::fs::create_dir_all(dir.join("recordings")).map_err(io("recordings"))?;
    let mut lines = Vec::new();
    for event in events {
        lines.extend(event.to_string().into_bytes());
        lines.push(b'\n');
    }
    std::fs::write(dir.join("events.jsonl"), &lines).map_err(io("events.jsonl"))?;
    let mut files = vec![FileEntry {
        path: "events.jsonl".into(),
        bytes: lines.len() as u64,
        sha256: sha256(&lines),
        mime_type: None,
        side: None,
        started: None,
    }];
    for (name, side, started, pcm) in recordings {
        let path = format!("recordings/{name}");
        std::fs::write(dir.join(&path), pcm).map_err(io(&path))?;
        let rate = if *side == "input" { 16_000 } else { 24_000 };
        files.push(FileEntry {
            path,
            bytes: pcm.len() as u64,
            sha256: sha256(pcm),
            mime_type: Some(format!("audio/pcm;rate={rate}")),
            side: Some((*side).to_owned()),
            started: Some(*started),
        });
    }
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        app_name: "livegate".into(),
        user_id: user_id.into(),
        session_id: session_id.into(),
        state: Map::new(),
        exported_by: livegate::BUILD.into(),
        files,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| BundleError::Corrupt {
        bundle: bundle.clone(),
        file: "bundle.json".into(),
        reason: e.to_string(),
    })?;
    std::fs::write(dir.join("bundle.json"), json).map_err(io("bundle.json"))
}

/// Unpacks the export's tar (regular files of one folder) under `out`; the bundle folders it
/// made. Only plain relative paths are written: an entry that would land outside `out`, or of
/// another type, is refused.
pub fn unpack(tar: &[u8], out: &Path) -> Result<Vec<PathBuf>, BundleError> {
    let bad = |reason: String| BundleError::Corrupt {
        bundle: out.display().to_string(),
        file: "the export's tar".into(),
        reason,
    };
    let mut folders: Vec<PathBuf> = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() {
        let header = &tar[at..at + 512];
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let field = |from: usize, len: usize| {
            let raw = &header[from..from + len];
            let end = raw.iter().position(|&b| b == 0).unwrap_or(len);
            String::from_utf8_lossy(&raw[..end]).trim().to_owned()
        };
        let size = u64::from_str_radix(&field(124, 12), 8)
            .map_err(|_| bad(format!("bad size at byte {at}")))?;
        let size = usize::try_from(size).map_err(|_| bad("entry too large".into()))?;
        let (prefix, name) = (field(345, 155), field(0, 100));
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let kind = header[156];
        let start = at + 512;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= tar.len())
            .ok_or_else(|| bad(format!("{path} is cut short")))?;
        if kind != b'0' && kind != 0 {
            return Err(bad(format!("{path} is not a regular file")));
        }
        if !inside(&path) {
            return Err(bad(format!(
                "{path:?} would land outside {}",
                out.display()
            )));
        }
        let target = out.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| BundleError::Io {
                bundle: out.display().to_string(),
                file: path.clone(),
                source,
            })?;
        }
        std::fs::write(&target, &tar[start..end]).map_err(|source| BundleError::Io {
            bundle: out.display().to_string(),
            file: path.clone(),
            source,
        })?;
        if let Some(Component::Normal(top)) = Path::new(&path).components().next() {
            let folder = out.join(top);
            if !folders.contains(&folder) {
                folders.push(folder);
            }
        }
        at = start + size.div_ceil(512) * 512;
    }
    Ok(folders)
}

/// The bundles under `path`: itself when it holds `bundle.json`, else each folder in it that
/// does, by name.
pub fn find(path: &Path) -> Result<Vec<PathBuf>, BundleError> {
    if path.join("bundle.json").exists() {
        return Ok(vec![path.to_owned()]);
    }
    let listing = std::fs::read_dir(path).map_err(|source| BundleError::Io {
        bundle: path.display().to_string(),
        file: ".".into(),
        source,
    })?;
    let mut found: Vec<PathBuf> = listing
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("bundle.json").exists())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(BundleError::Missing {
            bundle: path.display().to_string(),
            file: "bundle.json".into(),
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside() {
        assert!(inside("recordings/a.pcm") && inside("events.jsonl"));
        assert!(!inside("../x") && !inside("/etc/passwd") && !inside("a/../../b") && !inside(""));
    }

    #[test]
    fn rates_come_from_the_mime_type() {
        assert_eq!(pcm_rate("audio/pcm;rate=24000", 16_000), 24_000);
        assert_eq!(pcm_rate("audio/pcm", 16_000), 16_000);
    }

    #[test]
    fn bad_event_lines_are_named() {
        assert_eq!(parse_events(b"{}\n\n{\"a\":1}\n").unwrap().len(), 2);
        let error = parse_events(b"{}\n[1]\n").unwrap_err().to_string();
        assert!(error.starts_with("line 2"), "{error}");
    }
}
