//! The batching writer the SQL stores share. `append_events` prepares a call's events, hands
//! them to a writer task and waits for their commit (commit-before-yield); the writer takes the
//! first waiting group and whatever is queued behind it (`Batches::next`) and gives the batch to
//! its backend's commit, which settles each append. A backend writes only its commit and what it
//! stores beside each event (`Append::encoded`).

use std::fmt::Display;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::state::{apply_committed, prepare_append};
use super::{Session, SessionError};
use crate::event::Event;

/// What a writer says of one append: `true` stored, `false` it was already there.
type Outcome = (Event, Result<bool, SessionError>);

/// An event waiting for a writer, in its backend's encoding, and where its outcome goes.
#[derive(Debug)]
pub(super) struct Append<E> {
    pub app_name: String,
    pub user_id: String,
    pub session_id: String,
    pub event: Event,
    /// What the backend's commit writes for the event (its JSON, at least).
    pub encoded: E,
    done: oneshot::Sender<Outcome>,
}

impl<E> Append<E> {
    /// Hands the outcome to the caller waiting for it (a caller gone is not waited for).
    pub fn settle(self, outcome: Result<bool, SessionError>) {
        let _ = self.done.send((self.event, outcome));
    }
}

/// Settles the appends of `batch` with their outcomes, in order.
pub(super) fn settle_all<E>(batch: &mut Vec<Append<E>>, outcomes: Vec<Result<bool, SessionError>>) {
    for (append, outcome) in batch.drain(..).zip(outcomes) {
        append.settle(outcome);
    }
}

/// Fails every append of `batch` with the error that failed their commit.
pub(super) fn fail_all<E>(batch: &mut Vec<Append<E>>, error: &dyn Display) {
    for append in batch.drain(..) {
        append.settle(Err(SessionError::Database(sqlx::Error::Protocol(format!(
            "commit failed: {error}"
        )))));
    }
}

/// The error of an append whose writer task has stopped.
pub(super) fn writer_gone() -> SessionError {
    SessionError::Database(sqlx::Error::PoolClosed)
}

/// A writer's queue: groups of appends, each one call's events (committed together).
pub(super) type Queue<E> = mpsc::Sender<Vec<Append<E>>>;

/// The batches a writer takes from its queue.
pub(super) struct Batches<E> {
    queue: mpsc::Receiver<Vec<Append<E>>>,
    batch: Vec<Append<E>>,
    max: usize,
}

/// A writer's queue (room for four batches of `max_batch`) and its end for the writer.
pub(super) fn queue<E>(max_batch: usize) -> (Queue<E>, Batches<E>) {
    let (tx, rx) = mpsc::channel(max_batch * 4);
    let batches = Batches {
        queue: rx,
        batch: Vec::with_capacity(max_batch),
        max: max_batch,
    };
    (tx, batches)
}

impl<E> Batches<E> {
    /// The first waiting group and everything queued behind it, up to `max_batch` (a group is
    /// taken whole, so a batch is at most one group short of twice that); `None` once every
    /// sender is gone. Appends the last commit left unsettled are dropped: their callers see
    /// `writer_gone`.
    pub async fn next(&mut self) -> Option<&mut Vec<Append<E>>> {
        self.batch.clear();
        let first = self.queue.recv().await?;
        self.batch.extend(first);
        while self.batch.len() < self.max {
            match self.queue.try_recv() {
                Ok(more) => self.batch.extend(more),
                Err(_) => break,
            }
        }
        Some(&mut self.batch)
    }
}

/// An event's way through `append_events`: settled there (boxed: rare, as callers hand over
/// events to store), or waiting for the writer.
enum Slot {
    Settled(Box<Result<Event, SessionError>>),
    Queued {
        full_delta: Map<String, Value>,
        outcome: oneshot::Receiver<Outcome>,
    },
}

/// Stores `events` in `session` through the writer behind `queue`: each is prepared, encoded by
/// `encode`, handed over in groups of at most `max_batch` (so that one statement's parameters
/// stay within a backend's limit however many events a caller hands over), and once committed
/// applied to `session`. An event the writer reports fenced fences the session.
pub(super) async fn append_events<E>(
    session: &mut Session,
    events: Vec<Event>,
    queue: &Queue<E>,
    max_batch: usize,
    encode: impl Fn(&Event) -> Result<E, SessionError>,
) -> Vec<Result<Event, SessionError>> {
    let mut slots = Vec::with_capacity(events.len());
    let mut appends = Vec::with_capacity(events.len());
    for mut event in events {
        let Some(full_delta) = prepare_append(&mut event) else {
            slots.push(Slot::Settled(Box::new(Ok(event))));
            continue;
        };
        let encoded = match encode(&event) {
            Ok(encoded) => encoded,
            Err(error) => {
                slots.push(Slot::Settled(Box::new(Err(error))));
                continue;
            }
        };
        let (done, outcome) = oneshot::channel();
        appends.push(Append {
            app_name: session.app_name.clone(),
            user_id: session.user_id.clone(),
            session_id: session.id.clone(),
            event,
            encoded,
            done,
        });
        slots.push(Slot::Queued {
            full_delta,
            outcome,
        });
    }
    // A closed queue drops the appends, and with them their outcomes' senders.
    while !appends.is_empty() {
        let rest = appends.split_off(appends.len().min(max_batch));
        let _ = queue.send(appends).await;
        appends = rest;
    }
    let mut outcomes = Vec::with_capacity(slots.len());
    for slot in slots {
        outcomes.push(match slot {
            Slot::Settled(outcome) => *outcome,
            Slot::Queued {
                full_delta,
                outcome,
            } => match outcome.await {
                Err(_) => Err(writer_gone()),
                Ok((_, Err(error))) => {
                    if matches!(error, SessionError::Fenced(_)) {
                        session.fence.refuse();
                    }
                    Err(error)
                }
                // A re-delivery of an event already committed changes nothing.
                Ok((event, Ok(false))) => Ok(event),
                Ok((event, Ok(true))) => {
                    apply_committed(session, full_delta, &event);
                    Ok(event)
                }
            },
        });
    }
    outcomes
}
