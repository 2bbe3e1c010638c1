//! Session leases in PostgreSQL: one live run per session across every node sharing the store.
//!
//! A lease is a row: session → node, lease id, expiry. Each node renews all of its rows at once
//! every third of the time to live, so a node that dies without a word (`kill -9`) loses them
//! within that time. A node that wants a session another node holds tells the holder over
//! LISTEN/NOTIFY; the holder ends its run (its client gets 4000), flushes, deletes the row and
//! says so, and the waiting node takes the row. A holder that does not let go within the grace
//! loses the session anyway.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgListener, PgPool};
use sqlx::Row;

use crate::gateway::cluster::registry::SharedLeases;
use crate::latch::Latch;

/// The NOTIFY channel of every lease notice.
const CHANNEL: &str = "livegate_leases";
/// How often a waiting node looks at the lease row again even without a notice (notices are
/// lost while a listener reconnects).
const POLL: Duration = Duration::from_millis(250);
/// Pause after the listener's connection failed, before it reconnects.
const LISTEN_RETRY: Duration = Duration::from_millis(500);

/// What one node tells the others.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Notice {
    /// `node`'s lease `lease` on the session is wanted elsewhere: stop the run.
    Takeover {
        node: String,
        lease: i64,
        app: String,
        user: String,
        session: String,
    },
    /// The session's lease was given back.
    Released {
        app: String,
        user: String,
        session: String,
    },
}

type Key = (String, String);

/// This node's leases in PostgreSQL.
#[derive(Debug)]
pub struct PgLeases {
    pool: PgPool,
    app_name: String,
    /// This process's name in lease rows (unique per start: a restarted node's old rows expire).
    node: String,
    ttl: Duration,
    /// Leases this node holds, with what to fire when they are taken away.
    held: Mutex<HashMap<Key, (i64, Latch)>>,
    /// Woken by every release notice (waiters look at their row again).
    released: tokio::sync::Notify,
    /// Ends the listener and renewal tasks when the leases are dropped.
    stop: Latch,
}

impl Drop for PgLeases {
    fn drop(&mut self) {
        self.stop.fire();
    }
}

/// Outcome of one attempt at the lease row.
enum Attempt {
    Taken,
    HeldBy(String, i64),
    Gone,
}

impl PgLeases {
    /// Starts listening for notices and renewing this node's leases.
    pub async fn start(
        pool: PgPool,
        app_name: &str,
        ttl: Duration,
    ) -> Result<Arc<Self>, sqlx::Error> {
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        let leases = Arc::new(PgLeases {
            pool,
            app_name: app_name.to_owned(),
            node: uuid::Uuid::new_v4().to_string(),
            ttl: ttl.max(Duration::from_millis(300)),
            held: Mutex::new(HashMap::new()),
            released: tokio::sync::Notify::new(),
            stop: Latch::new(),
        });
        tokio::spawn(listen(
            Arc::downgrade(&leases),
            listener,
            leases.stop.clone(),
        ));
        tokio::spawn(renew(Arc::downgrade(&leases), leases.stop.clone()));
        tracing::info!(
            node = leases.node,
            ttl_ms = leases.ttl.as_millis() as u64,
            "session leases shared through PostgreSQL"
        );
        Ok(leases)
    }

    /// This node's name in lease rows.
    pub fn node(&self) -> &str {
        &self.node
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (i64, Latch)>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ttl_ms(&self) -> f64 {
        self.ttl.as_secs_f64() * 1000.0
    }

    async fn try_take(
        &self,
        user_id: &str,
        session_id: &str,
        lease: i64,
        force: bool,
    ) -> Result<Attempt, sqlx::Error> {
        // A free, expired or own (an older run on this node, already stopped) row is taken.
        let taken = sqlx::query(
            "INSERT INTO session_leases (app_name, user_id, session_id, node, lease, expires_at)
             VALUES ($1, $2, $3, $4, $5, now() + $6::double precision * interval '1 millisecond')
             ON CONFLICT (app_name, user_id, session_id) DO UPDATE
             SET node = excluded.node, lease = excluded.lease, expires_at = excluded.expires_at
             WHERE session_leases.expires_at < now() OR session_leases.node = excluded.node OR $7
             RETURNING 1",
        )
        .bind(&self.app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(&self.node)
        .bind(lease)
        .bind(self.ttl_ms())
        .bind(force)
        .fetch_optional(&self.pool)
        .await?;
        if taken.is_some() {
            return Ok(Attempt::Taken);
        }
        let holder = sqlx::query(
            "SELECT node, lease FROM session_leases
             WHERE app_name = $1 AND user_id = $2 AND session_id = $3",
        )
        .bind(&self.app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match holder {
            Some(row) => Attempt::HeldBy(row.try_get("node")?, row.try_get("lease")?),
            None => Attempt::Gone,
        })
    }

    async fn notify(&self, notice: &Notice) -> Result<(), sqlx::Error> {
        let payload = serde_json::to_string(notice).unwrap_or_default();
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Acts on a notice from any node.
    fn on_notice(&self, payload: &str) {
        let notice: Notice = match serde_json::from_str(payload) {
            Ok(notice) => notice,
            Err(error) => {
                tracing::debug!(%error, "ignoring a malformed lease notice");
                return;
            }
        };
        match notice {
            Notice::Takeover {
                node,
                lease,
                app,
                user,
                session,
            } if node == self.node && app == self.app_name => {
                let held = self.held().get(&(user, session)).cloned();
                if let Some((id, taken_over)) = held.filter(|(id, _)| *id == lease) {
                    tracing::info!(
                        lease = id,
                        "session wanted by another node; stopping its run"
                    );
                    taken_over.fire();
                }
            }
            Notice::Released { app, .. } if app == self.app_name => {
                self.released.notify_waiters();
            }
            _ => {}
        }
    }

    /// Renews every lease this node holds; fires those it no longer holds.
    async fn renew_once(&self, last_renewed: &mut Instant) {
        let snapshot: Vec<(Key, i64, Latch)> = self
            .held()
            .iter()
            .map(|(key, (lease, latch))| (key.clone(), *lease, latch.clone()))
            .collect();
        let renewed = sqlx::query(
            "UPDATE session_leases
             SET expires_at = now() + $3::double precision * interval '1 millisecond'
             WHERE app_name = $1 AND node = $2 RETURNING user_id, session_id, lease",
        )
        .bind(&self.app_name)
        .bind(&self.node)
        .bind(self.ttl_ms())
        .fetch_all(&self.pool)
        .await;
        let lost: Vec<(Key, i64, Latch)> = match renewed {
            Ok(rows) => {
                *last_renewed = Instant::now();
                let still: HashSet<(String, String, i64)> = rows
                    .iter()
                    .filter_map(|row| {
                        Some((
                            row.try_get("user_id").ok()?,
                            row.try_get("session_id").ok()?,
                            row.try_get("lease").ok()?,
                        ))
                    })
                    .collect();
                snapshot
                    .into_iter()
                    .filter(|((user, session), lease, _)| {
                        !still.contains(&(user.clone(), session.clone(), *lease))
                    })
                    .collect()
            }
            Err(error) => {
                tracing::warn!(%error, "could not renew session leases");
                if last_renewed.elapsed() < self.ttl {
                    return;
                }
                // Past the time to live other nodes may already run these sessions.
                snapshot
            }
        };
        for (key, lease, taken_over) in lost {
            let mut held = self.held();
            if held.get(&key).is_some_and(|(id, _)| *id == lease) {
                held.remove(&key);
                tracing::warn!(lease, "session lease lost; stopping its run");
                taken_over.fire();
            }
        }
    }
}

/// Hands every notice to the leases until they are dropped.
async fn listen(leases: Weak<PgLeases>, mut listener: PgListener, stop: Latch) {
    loop {
        let received = tokio::select! {
            () = stop.fired() => return,
            received = listener.recv() => received,
        };
        let Some(leases) = leases.upgrade() else {
            return;
        };
        match received {
            Ok(notification) => leases.on_notice(notification.payload()),
            Err(error) => {
                tracing::warn!(%error, "lease notices interrupted; reconnecting");
                // Waiters may have missed a release: let them look again.
                leases.released.notify_waiters();
                drop(leases);
                tokio::select! {
                    () = stop.fired() => return,
                    () = tokio::time::sleep(LISTEN_RETRY) => {}
                }
            }
        }
    }
}

/// Renews this node's leases every third of their time to live until they are dropped.
async fn renew(leases: Weak<PgLeases>, stop: Latch) {
    let mut last_renewed = Instant::now();
    loop {
        let Some(period) = leases.upgrade().map(|l| l.ttl / 3) else {
            return;
        };
        tokio::select! {
            () = stop.fired() => return,
            () = tokio::time::sleep(period) => {}
        }
        let Some(leases) = leases.upgrade() else {
            return;
        };
        leases.renew_once(&mut last_renewed).await;
    }
}

#[async_trait]
impl SharedLeases for PgLeases {
    async fn acquire(
        &self,
        user_id: &str,
        session_id: &str,
        lease: u64,
        grace: Duration,
        taken_over: Latch,
    ) {
        // Lease ids count up from 0 in each process; the row also names the node.
        let lease = i64::try_from(lease).unwrap_or(i64::MAX);
        let deadline = Instant::now() + grace;
        let mut told: Option<(String, i64)> = None;
        loop {
            // Made before looking, so a release between the look and the wait is not missed.
            let released = self.released.notified();
            let force = Instant::now() >= deadline;
            match self.try_take(user_id, session_id, lease, force).await {
                Ok(Attempt::Taken) => {
                    if force && told.is_some() {
                        tracing::warn!(
                            user_id,
                            session_id,
                            "the other node did not let go in time; taking over anyway"
                        );
                    }
                    self.held().insert(
                        (user_id.to_owned(), session_id.to_owned()),
                        (lease, taken_over),
                    );
                    return;
                }
                Ok(Attempt::Gone) => continue,
                Ok(Attempt::HeldBy(node, other)) => {
                    if told.as_ref() != Some(&(node.clone(), other)) {
                        let notice = Notice::Takeover {
                            node: node.clone(),
                            lease: other,
                            app: self.app_name.clone(),
                            user: user_id.to_owned(),
                            session: session_id.to_owned(),
                        };
                        if let Err(error) = self.notify(&notice).await {
                            tracing::warn!(%error, "could not ask the other node to let go");
                        }
                        told = Some((node, other));
                    }
                }
                Err(error) if force => {
                    tracing::error!(
                        %error,
                        user_id,
                        session_id,
                        "could not take the session's lease; running without it"
                    );
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "could not take the session's lease; retrying")
                }
            }
            let wait = deadline.saturating_duration_since(Instant::now()).min(POLL);
            let _ = tokio::time::timeout(wait, released).await;
        }
    }

    async fn release(&self, user_id: &str, session_id: &str, lease: u64) {
        let lease = i64::try_from(lease).unwrap_or(i64::MAX);
        {
            let mut held = self.held();
            let key = (user_id.to_owned(), session_id.to_owned());
            if held.get(&key).is_some_and(|(id, _)| *id == lease) {
                held.remove(&key);
            }
        }
        let notice = Notice::Released {
            app: self.app_name.clone(),
            user: user_id.to_owned(),
            session: session_id.to_owned(),
        };
        let payload = serde_json::to_string(&notice).unwrap_or_default();
        let released = sqlx::query(
            "WITH gone AS (
                 DELETE FROM session_leases
                 WHERE app_name = $1 AND user_id = $2 AND session_id = $3 AND node = $4
                   AND lease = $5
                 RETURNING 1)
             SELECT pg_notify($6, $7) FROM gone",
        )
        .bind(&self.app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(&self.node)
        .bind(lease)
        .bind(CHANNEL)
        .bind(payload)
        .execute(&self.pool)
        .await;
        if let Err(error) = released {
            // The row expires by itself.
            tracing::warn!(%error, "could not give a session lease back");
        }
    }
}
