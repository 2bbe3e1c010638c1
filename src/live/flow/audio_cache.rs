//! The live audio cache (`save_live_blob`): input and output audio per turn, flushed to artifacts
//! as `adk_live_audio_storage_{input|output}_audio_{first_chunk_ms}.{ext}` with a `fileData` event.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::sync::oneshot::{self, error::TryRecvError};

use super::spill::{self, SpillJob, Spilled};
use crate::artifact::{
    Artifact, ArtifactError, ArtifactScope, ArtifactService, SpoolDir, SpoolFile,
};
use crate::event::{now_timestamp, Blob, Content, Event, FileData, Part};

/// Audio a recording gathers in memory before it is written to its spool file (2 s of 16 kHz
/// input): a long turn then costs a session this much memory, not the whole turn's audio. Smaller
/// saves little more memory and costs a write on the spill thread per spill.
const SPILL_BYTES: usize = 64 * 1024;

/// The loudest sample of a silent recording: -40 dBFS, under speech and over a quiet room's
/// microphone noise.
const SILENCE_PEAK: i32 = 328;

/// True if no sample of PCM16 little-endian audio is louder than [`SILENCE_PEAK`].
fn is_silent_pcm16(pcm: &[u8]) -> bool {
    pcm.chunks_exact(2)
        .all(|s| i32::from(i16::from_le_bytes([s[0], s[1]])).abs() <= SILENCE_PEAK)
}

/// Recording audio a connection may hold in memory because it could not be written (a full
/// disk, a failing store) by default: past it, audio is dropped and the next flush says so.
pub const DEFAULT_MAX_UNSAVED_BYTES: usize = 32 * 1024 * 1024;

/// The cap every new [`AudioCache`] gets (the gateway sets it from its options at start).
static MAX_UNSAVED_BYTES: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_UNSAVED_BYTES);

/// Sets the cap on unsaved recording audio for caches made from now on (0: no cap).
pub fn set_max_unsaved_bytes(bytes: usize) {
    MAX_UNSAVED_BYTES.store(bytes, Ordering::Relaxed);
}

/// The error code of the event that reports dropped recording audio.
pub const RECORDING_DROPPED: &str = "RECORDING_DROPPED";

/// One side's audio of the current turn. The first chunk names the file (its time) and the
/// mime type; later chunks only add bytes, so caching a chunk is one refcounted `Bytes` push.
#[derive(Debug, Default)]
struct Recording {
    mime_type: String,
    started: f64,
    /// Audio not in the spool file yet, oldest first; it follows the spool's bytes.
    chunks: Vec<Bytes>,
    /// Bytes in `chunks`.
    pending: usize,
    spool: Spool,
    /// A failed save of it was reported to the client already: its later failures are not.
    reported: bool,
}

/// Where a recording's earlier audio is, besides memory.
#[derive(Debug, Default)]
enum Spool {
    /// Nowhere: all of it is in `chunks`.
    #[default]
    None,
    /// In a spool file that takes more.
    Ready(SpoolFile),
    /// A write of earlier chunks to the spool is under way.
    Writing(oneshot::Receiver<Spilled>),
    /// In a spool file that failed a write (if any), which takes no more: later audio stays in
    /// memory.
    Stuck(Option<SpoolFile>),
}

/// Where a spill's write runs.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// The spill thread, in a batch with other sessions' spills (nobody waits for it yet).
    SpillThread,
    /// The blocking pool, at once (the write is about to be awaited).
    BlockingPool,
}

impl Recording {
    fn is_empty(&self) -> bool {
        self.chunks.is_empty() && matches!(self.spool, Spool::None | Spool::Stuck(None))
    }

    /// Starts writing the chunks to the spool file unless a write is still under way.
    fn start_spill(&mut self, dir: &SpoolDir, via: Via) {
        if let Spool::Writing(done) = &mut self.spool {
            match done.try_recv() {
                Ok(spilled) => self.settle(Some(spilled)),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Closed) => self.settle(None),
            }
        }
        let spool = match std::mem::take(&mut self.spool) {
            Spool::None => None,
            Spool::Ready(spool) => Some(spool),
            other => {
                self.spool = other;
                return;
            }
        };
        let (done, spilled) = oneshot::channel();
        // The next batch is as long as this one: room for it now, or the pushes grow the list
        // from nothing again, seven times over for 64 KiB of 20 ms frames.
        let room = self.chunks.len();
        let job = SpillJob {
            spool,
            dir: dir.clone(),
            chunks: std::mem::replace(&mut self.chunks, Vec::with_capacity(room)),
            done,
        };
        let job = match via {
            Via::SpillThread => spill::submit(job),
            Via::BlockingPool => Err(job),
        };
        if let Err(job) = job {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                self.chunks = job.chunks;
                self.spool = job.spool.map_or(Spool::None, Spool::Ready);
                return;
            };
            runtime.spawn_blocking(move || job.run());
        }
        self.pending = 0;
        self.spool = Spool::Writing(spilled);
    }

    /// Takes back the spool after a write (`None`: the write was dropped before it ran); chunks a
    /// failed write returns go back in front.
    fn settle(&mut self, spilled: Option<Spilled>) {
        match spilled {
            Some(Spilled {
                spool,
                failed: None,
            }) => self.spool = spool.map_or(Spool::None, Spool::Ready),
            Some(Spilled {
                spool,
                failed: Some((error, mut chunks)),
            }) => {
                tracing::warn!(%error, "spooling a live audio recording failed; keeping the rest in memory");
                chunks.append(&mut self.chunks);
                self.pending = chunks.iter().map(Bytes::len).sum();
                self.chunks = chunks;
                self.spool = Spool::Stuck(spool);
            }
            None => {
                // Only a runtime shutting down (or a spill thread that died) drops a write
                // before it runs.
                tracing::error!("a spool write was cancelled; its audio is lost");
                self.spool = Spool::Stuck(None);
            }
        }
    }

    /// Waits for a write under way, then moves the remaining chunks to the spool file if there
    /// is one that takes them.
    async fn finish_spool(&mut self, dir: Option<&SpoolDir>) {
        self.await_spill().await;
        if let (Some(dir), Spool::Ready(_)) = (dir, &self.spool) {
            if !self.chunks.is_empty() {
                self.start_spill(dir, Via::BlockingPool);
                self.await_spill().await;
            }
        }
    }

    /// The artifact name of this recording on `side`, from its first chunk's time and type.
    fn filename(&self, side: AudioSide) -> String {
        let ext = self
            .mime_type
            .split(';')
            .next()
            .and_then(|t| t.split('/').nth(1))
            .unwrap_or("pcm")
            .trim();
        format!(
            "adk_live_audio_storage_{}_audio_{}.{ext}",
            side.label(),
            (self.started * 1000.0) as u64
        )
    }

    /// All of the recording for a store to keep: in one spool file in `dir` (chunks still in
    /// memory appended) when the disk takes it, else in memory (a full disk); `None` when
    /// nothing of it can be read back.
    async fn into_later(mut self, dir: Option<&SpoolDir>) -> Option<Later> {
        self.await_spill().await;
        let spool = match std::mem::take(&mut self.spool) {
            Spool::Ready(spool) => Some(spool),
            Spool::None => None,
            // Its file holds its first bytes but takes no more: read them back.
            Spool::Stuck(Some(spool)) => return self.into_memory(Some(&spool)).await,
            Spool::Writing(_) | Spool::Stuck(None) => return self.into_memory(None).await,
        };
        if self.chunks.is_empty() {
            return spool.map(Later::Spooled);
        }
        let Some(dir) = dir.cloned() else {
            return self.into_memory(spool.as_ref()).await;
        };
        let chunks = self.chunks.clone();
        let appended = tokio::task::spawn_blocking(move || {
            let mut spool = match spool {
                Some(spool) => spool,
                None => SpoolFile::create(&dir).map_err(|e| (e, None))?,
            };
            match spool.append(&chunks) {
                Ok(()) => Ok(spool),
                Err(error) => Err((error, Some(spool))),
            }
        })
        .await;
        match appended {
            Ok(Ok(spool)) => Some(Later::Spooled(spool)),
            Ok(Err((error, spool))) => {
                tracing::warn!(%error, "could not write a recording to disk for a later save; keeping it in memory");
                self.into_memory(spool.as_ref()).await
            }
            Err(_) => None,
        }
    }

    /// All of the recording in memory: what `spool` holds, then the chunks.
    async fn into_memory(self, spool: Option<&SpoolFile>) -> Option<Later> {
        let mut data = BytesMut::new();
        if let Some(spool) = spool {
            match spool.read().await {
                Ok(head) => data.extend_from_slice(&head),
                Err(error) => {
                    tracing::error!(%error, "a recording's spool file cannot be read back");
                    return None;
                }
            }
        }
        for chunk in &self.chunks {
            data.extend_from_slice(chunk);
        }
        Some(Later::InMemory(data.freeze()))
    }

    /// Waits for a write under way, if any, and takes back its spool.
    async fn await_spill(&mut self) {
        if let Spool::Writing(done) = &mut self.spool {
            let spilled = done.await.ok();
            self.settle(spilled);
        }
    }

    /// Saves the recording as a new version of `filename`; on error the recording comes back.
    async fn save(
        mut self,
        artifacts: &dyn ArtifactService,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<u64, (ArtifactError, Recording)> {
        match std::mem::take(&mut self.spool) {
            // All of it is in the file: the store takes the file over.
            Spool::Ready(spool) if self.chunks.is_empty() => {
                let mime_type = self.mime_type.clone();
                return match artifacts
                    .save_spooled(scope, filename, mime_type, spool)
                    .await
                {
                    Ok(version) => Ok(version),
                    Err((error, spool)) => {
                        self.spool = Spool::Ready(spool);
                        Err((error, self))
                    }
                };
            }
            other => self.spool = other,
        }
        // In memory, behind whatever a stuck spool holds.
        let mut data = BytesMut::with_capacity(self.pending);
        if let Spool::Ready(spool) | Spool::Stuck(Some(spool)) = &self.spool {
            match spool.read().await {
                Ok(head) => data.extend_from_slice(&head),
                Err(error) => return Err((error.into(), self)),
            }
        }
        for chunk in &self.chunks {
            data.extend_from_slice(chunk);
        }
        let artifact = Artifact {
            data: data.freeze(),
            mime_type: self.mime_type.clone(),
        };
        artifacts
            .save(scope, filename, artifact)
            .await
            .map_err(|error| (error, self))
    }
}

/// A recording handed to its store to save later, when its run ends unsaved.
#[derive(Debug)]
enum Later {
    /// Whole in a spool file.
    Spooled(SpoolFile),
    /// Whole in memory: the disk would not take it.
    InMemory(Bytes),
}

/// A side's recording of the current turn, and earlier ones whose save failed (retried first).
#[derive(Debug, Default)]
struct Side {
    current: Recording,
    held: Vec<Recording>,
    /// Bytes of audio dropped since the last flush because memory was at the cap.
    dropped: usize,
}

impl Side {
    /// Bytes of audio held in memory (what the spool files hold is not counted).
    fn in_memory(&self) -> usize {
        self.held
            .iter()
            .map(|r| r.pending)
            .sum::<usize>()
            .saturating_add(self.current.pending)
    }
}

/// Which side of the conversation a recording holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioSide {
    /// The user's microphone.
    Input,
    /// The model's voice.
    Output,
}

impl AudioSide {
    fn label(self) -> &'static str {
        match self {
            AudioSide::Input => "input",
            AudioSide::Output => "output",
        }
    }
}

/// Cached audio of the current turn, shared by the send loop (input) and receive loop (output).
///
/// The lock is only held to push or swap out a recording, never across an `.await`. With a spool
/// folder, a recording's audio goes to a file there every 64 KiB (`SPILL_BYTES`), written on the
/// spill thread, and the file becomes the artifact.
#[derive(Debug, Clone, Default)]
pub struct AudioCache {
    inner: Arc<Mutex<[Side; 2]>>,
    spool_dir: Option<SpoolDir>,
    /// Most bytes of audio both sides may hold in memory (0: no cap).
    max_unsaved: usize,
}

/// Where flushed recordings go and how their events are attributed.
#[derive(Debug, Clone)]
pub struct RecordingTarget {
    /// Artifact store; `None` keeps the audio cached (nothing is lost, nothing is saved).
    pub artifacts: Option<Arc<dyn ArtifactService>>,
    /// Application name.
    pub app_name: String,
    /// User id.
    pub user_id: String,
    /// Session id.
    pub session_id: String,
    /// Invocation id of the run.
    pub invocation_id: String,
    /// Author of output recordings (the agent).
    pub agent_name: String,
}

impl AudioCache {
    /// A cache that spools long recordings to files in `spool_dir` (see [`AudioCache`]).
    pub fn new(spool_dir: Option<SpoolDir>) -> Self {
        Self::with_cap(spool_dir, MAX_UNSAVED_BYTES.load(Ordering::Relaxed))
    }

    /// A cache holding at most `max_unsaved` bytes of audio in memory (0: no cap).
    pub fn with_cap(spool_dir: Option<SpoolDir>, max_unsaved: usize) -> Self {
        AudioCache {
            inner: Arc::default(),
            spool_dir,
            max_unsaved,
        }
    }

    /// True if `more` bytes would take both sides' memory past the cap.
    fn over_cap(&self, sides: &[Side; 2], more: usize) -> bool {
        let held = sides[0].in_memory().saturating_add(sides[1].in_memory());
        self.max_unsaved != 0 && held.saturating_add(more) > self.max_unsaved
    }

    /// Caches an audio blob (non-audio blobs are ignored, as in ADK 2.13).
    pub fn push(&self, side: AudioSide, blob: &Blob) {
        if !blob.is_audio() || blob.data.is_empty() {
            return;
        }
        if let Ok(mut sides) = self.inner.lock() {
            // Only audio that could not be written piles up (a working spool keeps a recording's
            // memory at one spill's worth): past the cap it is dropped, and said so at the flush.
            if self.over_cap(&sides, blob.data.len()) {
                sides[side as usize].dropped += blob.data.len();
                return;
            }
            let recording = &mut sides[side as usize].current;
            if recording.is_empty() {
                recording.mime_type.clone_from(&blob.mime_type);
                recording.started = now_timestamp();
            }
            recording.chunks.push(blob.data.clone());
            recording.pending += blob.data.len();
            if recording.pending >= SPILL_BYTES {
                if let Some(dir) = &self.spool_dir {
                    recording.start_spill(dir, Via::SpillThread);
                }
            }
        }
    }

    /// Forgets the input audio cached since the last flush when all of it is silence: the
    /// microphone's tail after the last turn, which a run's end would otherwise save as a
    /// recording of its own. Audio already spooled to a file is long, and kept.
    pub fn drop_silent_input(&self) {
        if let Ok(mut sides) = self.inner.lock() {
            let current = &mut sides[AudioSide::Input as usize].current;
            let silent = matches!(current.spool, Spool::None)
                && current.mime_type.starts_with("audio/pcm")
                && current.chunks.iter().all(|chunk| is_silent_pcm16(chunk));
            if silent && !current.chunks.is_empty() {
                tracing::debug!(bytes = current.pending, "dropping a silent input recording");
                *current = Recording::default();
            }
        }
    }

    /// Takes a side's held recordings and the current one, oldest first.
    fn take(&self, side: AudioSide) -> Vec<Recording> {
        self.inner
            .lock()
            .map(|mut sides| {
                let side = &mut sides[side as usize];
                let mut recordings = std::mem::take(&mut side.held);
                recordings.push(std::mem::take(&mut side.current));
                recordings
            })
            .unwrap_or_default()
    }

    /// Keeps a recording whose save failed, to retry at the next flush (after those held before).
    /// Past the memory cap, the oldest held recordings of the side are dropped instead.
    fn hold(&self, side: AudioSide, recording: Recording) {
        if let Ok(mut sides) = self.inner.lock() {
            sides[side as usize].held.push(recording);
            while self.over_cap(&sides, 0) && !sides[side as usize].held.is_empty() {
                let oldest = sides[side as usize].held.remove(0);
                // Its spool file, if any, is removed when the recording is dropped.
                sides[side as usize].dropped += oldest.pending;
            }
        }
    }

    /// Bytes dropped from a side since the last call, which resets them.
    fn take_dropped(&self, side: AudioSide) -> usize {
        self.inner
            .lock()
            .map(|mut sides| std::mem::take(&mut sides[side as usize].dropped))
            .unwrap_or(0)
    }

    /// Saves the cached audio of the chosen sides and returns the events to yield: a `fileData`
    /// event per saved recording, or an error event when a save failed (the audio stays cached
    /// and its save is retried at the next flush; a recording's failure is reported once, the
    /// first time). Error events are notices for the client: the flow does not store them.
    ///
    /// The recordings are saved at once, not one after another: each save ends in an `fsync`,
    /// and the turn's `turnComplete` waits for all of them, so on a busy disk the two sides of a
    /// turn wait for one journal commit rather than two. The events keep the sides' order, and
    /// recordings whose saves failed are held in it too (however the saves finished), so the
    /// next flush saves them oldest first.
    pub async fn flush(&self, target: &RecordingTarget, input: bool, output: bool) -> Vec<Event> {
        let Some(artifacts) = &target.artifacts else {
            return Vec::new();
        };
        let sides = [(input, AudioSide::Input), (output, AudioSide::Output)];
        let mut recordings: Vec<(AudioSide, Recording)> = sides
            .into_iter()
            .filter(|(on, _)| *on)
            .flat_map(|(_, side)| self.take(side).into_iter().map(move |r| (side, r)))
            .filter(|(_, recording)| !recording.is_empty())
            .collect();
        // Every spool is whole before any save starts, so the saves make their folders together
        // and share one sync of their session's folder (a file store syncs a folder once for
        // every change made in it before the sync started).
        let spool_dir = self.spool_dir.as_ref();
        futures::future::join_all(
            recordings
                .iter_mut()
                .map(|(_, recording)| recording.finish_spool(spool_dir)),
        )
        .await;
        let saves = recordings
            .into_iter()
            .map(|(side, recording)| self.save(&**artifacts, target, side, recording));
        let saved = futures::future::join_all(saves).await;
        let mut events: Vec<Event> = saved
            .into_iter()
            .filter_map(|(event, failed)| {
                if let Some((side, recording)) = failed {
                    self.hold(side, recording);
                }
                event
            })
            .collect();
        for (on, side) in sides {
            let dropped = if on { self.take_dropped(side) } else { 0 };
            if dropped > 0 {
                tracing::warn!(
                    side = side.label(),
                    dropped,
                    "recording audio dropped: it could not be saved and reached the memory cap"
                );
                events.push(Event::error(
                    &target.invocation_id,
                    &target.agent_name,
                    RECORDING_DROPPED,
                    format!(
                        "{dropped} bytes of {} audio were not recorded: recordings could not be saved and reached the memory cap",
                        side.label()
                    ),
                ));
            }
        }
        events
    }

    /// Hands the recordings whose saves failed (and any not flushed) to the store when the run
    /// ends: a store that can keeps them on local disk and saves them once it can again (an
    /// object store whose bucket is out of reach); with any other they end with the run.
    pub async fn save_held_later(&self, target: &RecordingTarget) {
        let Some(artifacts) = &target.artifacts else {
            return;
        };
        let left: Vec<(AudioSide, Recording)> = [AudioSide::Input, AudioSide::Output]
            .into_iter()
            .flat_map(|side| self.take(side).into_iter().map(move |r| (side, r)))
            .filter(|(_, recording)| !recording.is_empty())
            .collect();
        let scope = ArtifactScope {
            app_name: &target.app_name,
            user_id: &target.user_id,
            session_id: &target.session_id,
        };
        for (side, recording) in left {
            let filename = recording.filename(side);
            let mime_type = recording.mime_type.clone();
            let kept = match recording.into_later(self.spool_dir.as_ref()).await {
                Some(Later::Spooled(spool)) => artifacts
                    .save_later(scope, &filename, mime_type, spool)
                    .await
                    .map_err(|(error, _)| error),
                Some(Later::InMemory(data)) => {
                    artifacts
                        .save_later_in_memory(scope, &filename, mime_type, data)
                        .await
                }
                None => continue,
            };
            if let Err(error) = kept {
                tracing::error!(%error, filename, "a recording whose save failed ends with its run");
            }
        }
    }

    /// Saves one recording (its spool finished): its `fileData` event, or the recording to hold
    /// and, the first time it fails, an error event (retries that fail again are logged, not
    /// reported again).
    async fn save(
        &self,
        artifacts: &dyn ArtifactService,
        target: &RecordingTarget,
        side: AudioSide,
        recording: Recording,
    ) -> (Option<Event>, Option<(AudioSide, Recording)>) {
        let mime_type = recording.mime_type.clone();
        let timestamp = recording.started;
        let filename = recording.filename(side);
        let scope = ArtifactScope {
            app_name: &target.app_name,
            user_id: &target.user_id,
            session_id: &target.session_id,
        };
        match recording.save(artifacts, scope, &filename).await {
            Ok(version) => {
                let (author, role) = match side {
                    AudioSide::Input => ("user", "user"),
                    AudioSide::Output => (target.agent_name.as_str(), "model"),
                };
                let mut event = Event::new(&target.invocation_id, author);
                event.timestamp = timestamp;
                event.content = Some(Content {
                    parts: vec![Part {
                        file_data: Some(FileData {
                            display_name: None,
                            file_uri: format!(
                                "artifact://{}/{}/{}/_adk_live/{filename}#{version}",
                                target.app_name, target.user_id, target.session_id
                            ),
                            mime_type: Some(mime_type),
                        }),
                        ..Part::default()
                    }],
                    role: Some(role.into()),
                });
                (Some(event), None)
            }
            Err((error, mut recording)) => {
                tracing::warn!(%error, filename, "saving a live audio recording failed; keeping it cached");
                if recording.reported {
                    return (None, Some((side, recording)));
                }
                recording.reported = true;
                let error = Event::error(
                    &target.invocation_id,
                    &target.agent_name,
                    error.code(),
                    format!("could not save audio recording {filename}: {error}"),
                );
                (Some(error), Some((side, recording)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::artifact::FileArtifactService;

    /// A 20 ms frame of 16 kHz input audio, different for each `n`.
    fn frame(n: usize) -> Blob {
        Blob {
            data: Bytes::from(vec![(n % 251) as u8; 640]),
            mime_type: "audio/pcm;rate=16000".into(),
            ..Blob::default()
        }
    }

    fn target(artifacts: Arc<dyn ArtifactService>) -> RecordingTarget {
        RecordingTarget {
            artifacts: Some(artifacts),
            app_name: "app".into(),
            user_id: "u".into(),
            session_id: "s".into(),
            invocation_id: "e-1".into(),
            agent_name: "agent".into(),
        }
    }

    const SCOPE: ArtifactScope<'static> = ArtifactScope {
        app_name: "app",
        user_id: "u",
        session_id: "s",
    };

    /// The artifact an event's `fileData` points at.
    async fn saved(artifacts: &dyn ArtifactService, event: &Event) -> Artifact {
        let uri = &event.content.as_ref().unwrap().parts[0]
            .file_data
            .as_ref()
            .unwrap()
            .file_uri;
        let (path, version) = uri.rsplit_once('#').unwrap();
        let filename = path.rsplit('/').next().unwrap();
        let version = version.parse().unwrap();
        artifacts
            .load(SCOPE, filename, Some(version))
            .await
            .unwrap()
            .unwrap()
    }

    fn frames(range: std::ops::Range<usize>) -> Vec<u8> {
        range.flat_map(|n| frame(n).data.to_vec()).collect()
    }

    /// Asserts equal bytes without printing them.
    fn assert_same(got: &[u8], want: &[u8]) {
        assert_eq!(got.len(), want.len(), "length");
        assert!(got == want, "same length, different bytes");
    }

    /// Waits for a spill under way, if any, to finish.
    async fn settle_spill(cache: &AudioCache, side: AudioSide) {
        let mut recording = std::mem::take(&mut cache.inner.lock().unwrap()[side as usize].current);
        tokio::time::timeout(std::time::Duration::from_secs(10), recording.await_spill())
            .await
            .unwrap();
        cache.inner.lock().unwrap()[side as usize].current = recording;
    }

    fn pending(cache: &AudioCache, side: AudioSide) -> usize {
        cache.inner.lock().unwrap()[side as usize].current.pending
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_recording_is_spooled_to_a_file_that_becomes_the_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileArtifactService::open(dir.path()).await.unwrap());
        let spool_dir = store.spool_dir().unwrap().clone();
        let cache = AudioCache::new(Some(spool_dir.clone()));
        // 16 s of input, in 2 s steps: the cache holds at most a spill's worth and one step.
        for step in 0..8 {
            for n in step * 100..(step + 1) * 100 {
                cache.push(AudioSide::Input, &frame(n));
            }
            settle_spill(&cache, AudioSide::Input).await;
            let held = pending(&cache, AudioSide::Input);
            assert!(held < SPILL_BYTES + 100 * 640, "held {held} bytes");
        }
        assert_eq!(std::fs::read_dir(&spool_dir).unwrap().count(), 1);

        let events = cache.flush(&target(store.clone()), true, true).await;
        assert_eq!(events.len(), 1);
        let artifact = saved(&*store, &events[0]).await;
        assert_same(&artifact.data, &frames(0..800));
        assert_eq!(artifact.mime_type, "audio/pcm;rate=16000");
        assert_eq!(std::fs::read_dir(&spool_dir).unwrap().count(), 0);
        assert!(cache.flush(&target(store), true, true).await.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spool_that_cannot_be_written_keeps_the_audio_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            FileArtifactService::open(dir.path().join("store"))
                .await
                .unwrap(),
        );
        // A file where the spool folder should be: every spill fails.
        let blocked = dir.path().join("not-a-dir");
        std::fs::write(&blocked, b"").unwrap();
        let cache = AudioCache::new(Some(blocked.into()));
        for n in 0..300 {
            cache.push(AudioSide::Output, &frame(n));
        }
        let events = cache.flush(&target(store.clone()), true, true).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_same(&saved(&*store, &events[0]).await.data, &frames(0..300));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn audio_that_cannot_be_saved_is_dropped_past_the_memory_cap() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(TestStore::open(&dir.path().join("store")).await);
        store.fail.store(usize::MAX, Ordering::SeqCst);
        // No spool (a file where its folder should be) and a store that fails every save: a
        // disk that is full. The cap is 100 frames.
        let blocked = dir.path().join("not-a-dir");
        std::fs::write(&blocked, b"").unwrap();
        let cap = 100 * 640;
        let cache = AudioCache::with_cap(Some(blocked.into()), cap);
        let in_memory = |cache: &AudioCache| {
            let sides = cache.inner.lock().unwrap();
            sides[0].in_memory() + sides[1].in_memory()
        };
        for round in 0..3 {
            for n in round * 300..(round + 1) * 300 {
                cache.push(AudioSide::Output, &frame(n));
                assert!(in_memory(&cache) <= cap);
            }
            let events = cache.flush(&target(store.clone()), true, true).await;
            let codes: Vec<_> = events.iter().filter_map(|e| e.error_code.clone()).collect();
            assert!(codes.iter().any(|c| c == RECORDING_DROPPED), "{codes:?}");
            assert!(in_memory(&cache) <= cap);
        }
        // The disk has room again: what was kept is saved, the first 100 frames.
        store.fail.store(0, Ordering::SeqCst);
        let events = cache.flush(&target(store.clone()), true, true).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_same(&saved(&*store, &events[0]).await.data, &frames(0..100));
        assert_eq!(in_memory(&cache), 0);
    }

    /// A file store whose next saves fail, or whose saves each wait for a second one to start.
    #[derive(Debug)]
    struct TestStore {
        store: FileArtifactService,
        /// Saves still to fail.
        fail: AtomicUsize,
        in_pairs: Option<tokio::sync::Barrier>,
    }

    impl TestStore {
        async fn open(dir: &std::path::Path) -> Self {
            TestStore {
                store: FileArtifactService::open(dir).await.unwrap(),
                fail: AtomicUsize::new(0),
                in_pairs: None,
            }
        }

        async fn failed(&self) -> Option<ArtifactError> {
            if let Some(pair) = &self.in_pairs {
                if tokio::time::timeout(Duration::from_secs(5), pair.wait())
                    .await
                    .is_err()
                {
                    return Some(ArtifactError::Io(std::io::Error::other(
                        "no other save started",
                    )));
                }
            }
            self.fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
                .then(|| ArtifactError::Io(std::io::Error::other("disk on fire")))
        }
    }

    #[async_trait]
    impl ArtifactService for TestStore {
        async fn save(
            &self,
            scope: ArtifactScope<'_>,
            filename: &str,
            artifact: Artifact,
        ) -> Result<u64, ArtifactError> {
            match self.failed().await {
                Some(error) => Err(error),
                None => self.store.save(scope, filename, artifact).await,
            }
        }
        async fn load(
            &self,
            scope: ArtifactScope<'_>,
            filename: &str,
            version: Option<u64>,
        ) -> Result<Option<Artifact>, ArtifactError> {
            self.store.load(scope, filename, version).await
        }
        async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
            self.store.list_names(scope).await
        }
        async fn list_versions(
            &self,
            scope: ArtifactScope<'_>,
            filename: &str,
        ) -> Result<Vec<u64>, ArtifactError> {
            self.store.list_versions(scope, filename).await
        }
        async fn delete(
            &self,
            scope: ArtifactScope<'_>,
            filename: &str,
        ) -> Result<(), ArtifactError> {
            self.store.delete(scope, filename).await
        }
        fn spool_dir(&self) -> Option<&SpoolDir> {
            self.store.spool_dir()
        }
        async fn save_spooled(
            &self,
            scope: ArtifactScope<'_>,
            filename: &str,
            mime_type: String,
            spool: SpoolFile,
        ) -> Result<u64, (ArtifactError, SpoolFile)> {
            match self.failed().await {
                Some(error) => Err((error, spool)),
                None => {
                    self.store
                        .save_spooled(scope, filename, mime_type, spool)
                        .await
                }
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recording_whose_save_failed_is_saved_whole_at_the_next_flush() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(TestStore {
            fail: AtomicUsize::new(1),
            ..TestStore::open(dir.path()).await
        });
        let cache = AudioCache::new(store.spool_dir().cloned());
        for n in 0..250 {
            cache.push(AudioSide::Input, &frame(n));
        }
        let events = cache.flush(&target(store.clone()), true, true).await;
        assert_eq!(events.len(), 1);
        assert!(events[0].error_code.is_some(), "{:?}", events[0]);

        // The next turn's audio gets its own file; the kept one is saved first, whole.
        for n in 250..260 {
            cache.push(AudioSide::Input, &frame(n));
        }
        let events = cache.flush(&target(store.clone()), true, true).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert_same(&saved(&*store, &events[0]).await.data, &frames(0..250));
        assert_same(&saved(&*store, &events[1]).await.data, &frames(250..260));
        assert!(events[0].timestamp <= events[1].timestamp);
        let spool_dir = store.spool_dir().unwrap();
        assert_eq!(std::fs::read_dir(spool_dir).unwrap().count(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn recordings_held_after_failed_saves_are_saved_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(TestStore::open(dir.path()).await);
        let cache = AudioCache::new(store.spool_dir().cloned());
        let target = || target(store.clone());
        // Three turns' input: the first turn's save fails, then both saves of the second flush
        // (the held one and the new one, saved at once). A recording's failure is told once:
        // the held one's second failure is not told again.
        let mut errors = Vec::new();
        for (turn, fails) in [(0..5, 1), (5..10, 2), (10..15, 0)] {
            for n in turn {
                cache.push(AudioSide::Input, &frame(n));
            }
            store.fail.store(fails, Ordering::SeqCst);
            let events = cache.flush(&target(), true, false).await;
            errors.push(events.iter().filter(|e| e.error_code.is_some()).count());
            if fails == 0 {
                assert_eq!(events.len(), 3, "{events:?}");
                for (event, frames_of) in events.iter().zip([0..5, 5..10, 10..15]) {
                    assert_same(&saved(&*store, event).await.data, &frames(frames_of));
                }
            }
        }
        assert_eq!(errors, [1, 1, 0]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turns_two_recordings_are_saved_at_once_and_yielded_in_order() {
        let dir = tempfile::tempdir().unwrap();
        // Each save waits for the other to start: saved one after the other, both would fail.
        let store = Arc::new(TestStore {
            in_pairs: Some(tokio::sync::Barrier::new(2)),
            ..TestStore::open(dir.path()).await
        });
        let cache = AudioCache::new(store.spool_dir().cloned());
        for n in 0..5 {
            cache.push(AudioSide::Input, &frame(n));
        }
        // The answer is long enough to be spooled: both kinds of save take part.
        for n in 0..300 {
            cache.push(AudioSide::Output, &frame(1_000 + n));
        }
        settle_spill(&cache, AudioSide::Output).await;

        let events = cache.flush(&target(store.clone()), true, true).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(events.iter().all(|e| e.error_code.is_none()), "{events:?}");
        assert_eq!(events[0].author, "user");
        assert_same(&saved(&*store, &events[0]).await.data, &frames(0..5));
        assert_eq!(events[1].author, "agent");
        assert_same(
            &saved(&*store, &events[1]).await.data,
            &frames(1_000..1_300),
        );
    }

    #[test]
    fn only_a_silent_input_tail_is_dropped() {
        let pcm = |samples: &[i16]| Blob {
            data: samples.iter().flat_map(|s| s.to_le_bytes()).collect(),
            mime_type: "audio/pcm;rate=16000".into(),
            ..Blob::default()
        };
        let cache = AudioCache::new(None);
        cache.push(AudioSide::Input, &pcm(&[0, 12, -300, 328]));
        cache.push(AudioSide::Output, &pcm(&[0, 0]));
        cache.drop_silent_input();
        assert_eq!(pending(&cache, AudioSide::Input), 0, "near-silence dropped");
        assert_eq!(
            pending(&cache, AudioSide::Output),
            4,
            "the output side is kept"
        );

        cache.push(AudioSide::Input, &pcm(&[0, 0]));
        cache.push(AudioSide::Input, &pcm(&[0, -2_000, 0]));
        cache.drop_silent_input();
        assert_eq!(
            pending(&cache, AudioSide::Input),
            10,
            "a sound keeps it all"
        );
    }
}
