//! Spilling recordings' audio to their spool files, on one background thread.
//!
//! A blocking-pool trip per spill woke a thread for every 64 KiB of audio, many times a second
//! under load, and each wake-up could preempt a runtime worker. The spill thread
//! lingers after each batch so that, under load, one wake-up writes many spills. Spills are never
//! awaited on a latency path, only when a turn's recording is saved, and that last write goes to
//! the blocking pool instead (see `Recording::finish_spool` in `audio_cache`).

use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::artifact::{SpoolDir, SpoolFile};

/// How long the thread waits for more work after a batch before it sleeps until the next job.
const LINGER: Duration = Duration::from_millis(10);
/// Spills that may wait for the thread; when it is this far behind, they go to the blocking pool.
const QUEUE: usize = 4096;

/// What a spill hands back: the spool file and, if the write failed, its chunks.
#[derive(Debug)]
pub(super) struct Spilled {
    pub spool: Option<SpoolFile>,
    pub failed: Option<(std::io::Error, Vec<Bytes>)>,
}

/// One spill: chunks to append to a recording's spool file (created in `dir` if there is none).
#[derive(Debug)]
pub(super) struct SpillJob {
    pub spool: Option<SpoolFile>,
    pub dir: SpoolDir,
    pub chunks: Vec<Bytes>,
    pub done: oneshot::Sender<Spilled>,
}

impl SpillJob {
    /// Writes the chunks (blocking) and reports the outcome.
    pub fn run(self) {
        let spilled = spill(self.spool, &self.dir, self.chunks);
        // The recording may be gone (its run ended): then so is the spool, which removes its file.
        let _ = self.done.send(spilled);
    }
}

/// Appends chunks to a recording's spool file, creating it in `dir` first if needed (blocking).
fn spill(spool: Option<SpoolFile>, dir: &SpoolDir, chunks: Vec<Bytes>) -> Spilled {
    let mut spool = match spool {
        Some(spool) => spool,
        None => match SpoolFile::create(dir) {
            Ok(spool) => spool,
            Err(e) => {
                return Spilled {
                    spool: None,
                    failed: Some((e, chunks)),
                }
            }
        },
    };
    let failed = spool.append(&chunks).err().map(|e| (e, chunks));
    Spilled {
        spool: Some(spool),
        failed,
    }
}

static SPILLER: OnceLock<Option<SyncSender<SpillJob>>> = OnceLock::new();

/// Queues `job` for the spill thread (started on first use); gives it back when the thread is
/// too far behind or could not be started.
pub(super) fn submit(job: SpillJob) -> Result<(), SpillJob> {
    let Some(sender) = SPILLER.get_or_init(start) else {
        return Err(job);
    };
    match sender.try_send(job) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => Err(job),
    }
}

fn start() -> Option<SyncSender<SpillJob>> {
    let (sender, jobs) = mpsc::sync_channel(QUEUE);
    match std::thread::Builder::new()
        .name("livegate-spill".into())
        .spawn(move || run(&jobs))
    {
        Ok(_) => Some(sender),
        Err(error) => {
            tracing::error!(%error, "could not start the spill thread; recordings spill on the blocking pool");
            None
        }
    }
}

fn run(jobs: &Receiver<SpillJob>) {
    while let Ok(first) = jobs.recv() {
        first.run();
        // Under load more jobs arrive while one runs: take them in batches, one wake-up each.
        loop {
            std::thread::sleep(LINGER);
            let mut ran = false;
            while let Ok(job) = jobs.try_recv() {
                job.run();
                ran = true;
            }
            if !ran {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(
        spool: Option<SpoolFile>,
        dir: &std::path::Path,
        chunks: &[&'static [u8]],
    ) -> (SpillJob, oneshot::Receiver<Spilled>) {
        let (done, spilled) = oneshot::channel();
        let job = SpillJob {
            spool,
            dir: dir.into(),
            chunks: chunks.iter().map(|c| Bytes::from_static(c)).collect(),
            done,
        };
        (job, spilled)
    }

    async fn finished(spilled: oneshot::Receiver<Spilled>) -> Spilled {
        tokio::time::timeout(Duration::from_secs(10), spilled)
            .await
            .expect("the spill finished in time")
            .expect("the spill thread reported back")
    }

    #[tokio::test]
    async fn spills_on_the_thread_append_in_order_to_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let (first, spilled) = job(None, dir.path(), &[b"ab", b"cd"]);
        submit(first).expect("queued");
        let Spilled { spool, failed } = finished(spilled).await;
        assert!(failed.is_none());
        let (second, spilled) = job(spool, dir.path(), &[b"ef"]);
        submit(second).expect("queued");
        let Spilled { spool, failed } = finished(spilled).await;
        assert!(failed.is_none());
        let spool = spool.expect("the spool file");
        assert_eq!(spool.read().await.unwrap(), b"abcdef");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn a_spill_that_cannot_create_its_file_gives_the_chunks_back() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the spool folder should be.
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"").unwrap();
        let (job, spilled) = job(None, &not_a_dir, &[b"ab", b"cd"]);
        submit(job).expect("queued");
        let Spilled { spool, failed } = finished(spilled).await;
        assert!(spool.is_none());
        let (_, chunks) = failed.expect("the write failed");
        assert_eq!(
            chunks,
            vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]
        );
    }
}
