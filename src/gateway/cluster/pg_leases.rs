//! Session leases in PostgreSQL: one live run per session across every node sharing the store.
//!
//! A lease is a row: session → node, lease id, expiry, and the fencing epoch drawn when it was
//! taken. Each node renews all of its rows at once every third of the time to live, so a node
//! that dies without a word (`kill -9`) loses them within that time. A node that wants a session
//! another node holds tells the holder over LISTEN/NOTIFY, again every second while it waits
//! (a notice is lost while a listener reconnects); the holder ends its run (its client gets
//! 4000), flushes, deletes the row and says so, and the waiting node takes the row. A holder
//! that does not let go within the grace loses the session anyway, and the epoch fences its
//! late writes out (`session::Fence`). A store unreachable for the time to live ends the runs
//! (their clients are told to try again), and one unreachable for the grace lets no run start.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sqlx::Row;

use crate::gateway::cluster::registry::{Lease, LeaseError, SharedLeases};
use crate::latch::Latch;
use crate::lock::Recover;

/// The NOTIFY channel of every lease notice.
const CHANNEL: &str = "livegate_leases";
/// How often a waiting node looks at the lease row again even without a notice (notices are
/// lost while a listener reconnects).
const POLL: Duration = Duration::from_millis(250);
/// Pause after the listener's connection failed, before it reconnects.
const LISTEN_RETRY: Duration = Duration::from_millis(500);
/// Connections of the renewals' own pool (the listener has one more). Renewals never queue
/// behind the session store's reads and writes: a node busy with its sessions must not look like
/// one that lost its store, and stop them. Takes and releases share the session store's pool.
const LEASE_CONNECTIONS: u32 = 2;
/// How often a waiting node tells the holder again.
const RESEND: Duration = Duration::from_secs(1);
/// Most takeover notices kept for leases not registered yet (a notice may overtake the
/// registration of the lease it is for).
const MAX_EARLY_NOTICES: usize = 4096;

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
    /// The renewals' own connections.
    pool: PgPool,
    /// The session store's pool: takes, notices and releases.
    store: PgPool,
    app_name: String,
    /// This process's name in lease rows (unique per start: a restarted node's old rows expire).
    node: String,
    ttl: Duration,
    /// Leases this node holds, with what to fire when they are taken away.
    held: Mutex<HashMap<Key, HeldLease>>,
    /// Takeover notices for leases of this node not registered yet, with when each came.
    early: Mutex<HashMap<Key, (i64, Instant)>>,
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

/// A lease this node holds.
#[derive(Debug, Clone)]
struct HeldLease {
    lease: i64,
    /// Fired when another node takes the session.
    taken_over: Latch,
    /// Fired when the store stays unreachable for the time to live.
    store_lost: Latch,
}

/// Outcome of one attempt at the lease row.
enum Attempt {
    /// Taken, with this fencing epoch.
    Taken(i64),
    HeldBy(String, i64),
    Gone,
}

impl PgLeases {
    /// Starts listening for notices and renewing this node's leases, on connections of their
    /// own to the server `store` reaches (see `LEASE_CONNECTIONS`).
    pub async fn start(
        store: PgPool,
        app_name: &str,
        ttl: Duration,
    ) -> Result<Arc<Self>, sqlx::Error> {
        let ttl = ttl.max(Duration::from_millis(300));
        let pool = PgPoolOptions::new()
            .max_connections(LEASE_CONNECTIONS)
            .acquire_timeout(ttl)
            .connect_lazy_with((*store.connect_options()).clone());
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        let leases = Arc::new(PgLeases {
            pool,
            store,
            app_name: app_name.to_owned(),
            node: uuid::Uuid::new_v4().to_string(),
            ttl,
            held: Mutex::new(HashMap::new()),
            early: Mutex::new(HashMap::new()),
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

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, HeldLease>> {
        self.held.lock_or_recover()
    }

    fn early(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (i64, Instant)>> {
        self.early.lock_or_recover()
    }

    /// Registers a lease just taken; a takeover notice that came for it first fires it now.
    fn hold(&self, key: Key, held: HeldLease) {
        let early = self.early().remove(&key);
        if early.is_some_and(|(lease, _)| lease == held.lease) {
            tracing::info!(
                lease = held.lease,
                "session wanted by another node before its lease was registered; stopping its run"
            );
            held.taken_over.fire();
        }
        self.held().insert(key, held);
    }

    /// Keeps a takeover notice for a lease not registered yet (bounded: the oldest go).
    fn keep_early(&self, key: Key, lease: i64) {
        let mut early = self.early();
        let ttl = self.ttl;
        early.retain(|_, (_, at)| at.elapsed() < ttl);
        if early.len() >= MAX_EARLY_NOTICES {
            if let Some(oldest) = early
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                early.remove(&oldest);
            }
        }
        early.insert(key, (lease, Instant::now()));
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
        // A free, expired or own (an older run on this node, already stopped) row is taken,
        // with a new epoch: whoever held it before is fenced out.
        let taken: Option<i64> = sqlx::query_scalar(
            "INSERT INTO session_leases
                 (app_name, user_id, session_id, node, lease, expires_at, epoch)
             VALUES ($1, $2, $3, $4, $5, now() + $6::double precision * interval '1 millisecond',
                     nextval('session_lease_epochs'))
             ON CONFLICT (app_name, user_id, session_id) DO UPDATE
             SET node = excluded.node, lease = excluded.lease, expires_at = excluded.expires_at,
                 epoch = excluded.epoch
             WHERE session_leases.expires_at < now() OR session_leases.node = excluded.node OR $7
             RETURNING epoch",
        )
        .bind(&self.app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(&self.node)
        .bind(lease)
        .bind(self.ttl_ms())
        .bind(force)
        .fetch_optional(&self.store)
        .await?;
        if let Some(epoch) = taken {
            return Ok(Attempt::Taken(epoch));
        }
        let holder = sqlx::query(
            "SELECT node, lease FROM session_leases
             WHERE app_name = $1 AND user_id = $2 AND session_id = $3",
        )
        .bind(&self.app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&self.store)
        .await?;
        Ok(match holder {
            Some(row) => Attempt::HeldBy(row.try_get("node")?, row.try_get("lease")?),
            None => Attempt::Gone,
        })
    }

    /// `try_take`, bounded by the time to live: a store that accepts connections and never
    /// answers (a black-holed network) fails it like one that refuses them.
    async fn bounded_take(
        &self,
        user_id: &str,
        session_id: &str,
        lease: i64,
        force: bool,
    ) -> Result<Attempt, sqlx::Error> {
        tokio::time::timeout(self.ttl, self.try_take(user_id, session_id, lease, force))
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    async fn notify(&self, notice: &Notice) -> Result<(), sqlx::Error> {
        let payload = serde_json::to_string(notice).unwrap_or_default();
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(&self.store)
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
                let key = (user, session);
                let held = self.held().get(&key).cloned();
                match held {
                    Some(held) if held.lease == lease => {
                        if held.taken_over.fire() {
                            tracing::info!(
                                lease,
                                "session wanted by another node; stopping its run"
                            );
                        }
                    }
                    // Taken by this node, not registered yet: fired when it is.
                    None => self.keep_early(key, lease),
                    // For an older lease of this node: that run has stopped already.
                    Some(_) => {}
                }
            }
            Notice::Released { app, .. } if app == self.app_name => {
                self.released.notify_waiters();
            }
            _ => {}
        }
    }

    /// Renews every lease this node holds; fires those it no longer holds: taken over when
    /// another node has them, store lost once it could not renew for the time to live.
    async fn renew_once(&self, last_renewed: &mut Instant) {
        let snapshot: Vec<(Key, HeldLease)> = self
            .held()
            .iter()
            .map(|(key, held)| (key.clone(), held.clone()))
            .collect();
        let renewal = sqlx::query(
            "UPDATE session_leases
             SET expires_at = now() + $3::double precision * interval '1 millisecond'
             WHERE app_name = $1 AND node = $2 RETURNING user_id, session_id, lease",
        )
        .bind(&self.app_name)
        .bind(&self.node)
        .bind(self.ttl_ms())
        .fetch_all(&self.pool);
        // Bounded: a renewal that never comes back (a black-holed network) is a failed one.
        let renewed = tokio::time::timeout(self.ttl / 2, renewal)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut));
        let (lost, outage): (Vec<(Key, HeldLease)>, bool) = match renewed {
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
                let lost = snapshot
                    .into_iter()
                    .filter(|((user, session), held)| {
                        !still.contains(&(user.clone(), session.clone(), held.lease))
                    })
                    .collect();
                (lost, false)
            }
            Err(error) => {
                tracing::warn!(%error, "could not renew session leases");
                if last_renewed.elapsed() < self.ttl {
                    return;
                }
                // Past the time to live other nodes may already run these sessions.
                (snapshot, true)
            }
        };
        for (key, lost) in lost {
            let mut held = self.held();
            if held.get(&key).is_some_and(|h| h.lease == lost.lease) {
                held.remove(&key);
                drop(held);
                if outage {
                    tracing::warn!(
                        lease = lost.lease,
                        "session store unreachable past the lease TTL; stopping the run"
                    );
                    lost.store_lost.fire();
                } else {
                    tracing::warn!(lease = lost.lease, "session lease lost; stopping its run");
                    lost.taken_over.fire();
                }
            }
        }
    }
}

/// One node's wait for a session's lease, with the steps of [`PgLeases::acquire`].
struct Acquiring<'a> {
    leases: &'a PgLeases,
    user_id: &'a str,
    session_id: &'a str,
    lease: &'a Lease,
    /// Lease ids count up from 0 in each process; the row also names the node.
    id: i64,
    /// When the holder's grace ends and the session is taken anyway.
    deadline: Instant,
    /// The holder last told to let go, and when.
    told: Option<(String, i64, Instant)>,
    /// Since when the store has failed every attempt.
    unreachable_since: Option<Instant>,
    /// How long the store may fail every attempt before the run is refused: the grace, or the
    /// time to live if longer (a busy store is slow, not gone).
    patience: Duration,
}

impl<'a> Acquiring<'a> {
    fn new(
        leases: &'a PgLeases,
        user_id: &'a str,
        session_id: &'a str,
        lease: &'a Lease,
        grace: Duration,
    ) -> Self {
        Acquiring {
            leases,
            user_id,
            session_id,
            lease,
            id: i64::try_from(lease.id()).unwrap_or(i64::MAX),
            deadline: Instant::now() + grace,
            told: None,
            unreachable_since: None,
            patience: grace.max(leases.ttl),
        }
    }

    /// One look at the row: the outcome once there is one.
    async fn attempt(&mut self) -> Option<Result<i64, LeaseError>> {
        if self.lease.taken_over.is_fired() {
            return Some(Err(LeaseError::Superseded));
        }
        let leases = self.leases;
        let force = Instant::now() >= self.deadline;
        let mut attempt = leases
            .bounded_take(self.user_id, self.session_id, self.id, force)
            .await;
        // The row went between the insert and the look: look again at once.
        while matches!(attempt, Ok(Attempt::Gone)) {
            attempt = leases
                .bounded_take(self.user_id, self.session_id, self.id, force)
                .await;
        }
        match attempt {
            Ok(Attempt::Taken(epoch)) => {
                if force && self.told.is_some() {
                    tracing::warn!(
                        user_id = self.user_id,
                        session_id = self.session_id,
                        "the other node did not let go in time; taking over anyway"
                    );
                }
                let held = HeldLease {
                    lease: self.id,
                    taken_over: self.lease.taken_over.clone(),
                    store_lost: self.lease.store_lost.clone(),
                };
                leases.hold((self.user_id.to_owned(), self.session_id.to_owned()), held);
                Some(Ok(epoch))
            }
            Ok(Attempt::Gone) => None,
            Ok(Attempt::HeldBy(node, other)) => {
                self.unreachable_since = None;
                self.tell(node, other).await;
                None
            }
            Err(error) => {
                let since = *self.unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.patience {
                    tracing::warn!(
                        %error,
                        user_id = self.user_id,
                        session_id = self.session_id,
                        "could not take the session's lease; the run does not start"
                    );
                    return Some(Err(LeaseError::Unavailable));
                }
                tracing::warn!(%error, "could not take the session's lease; retrying");
                None
            }
        }
    }

    /// Asks the holder to let go: once per holder, again every `RESEND` while it holds on.
    async fn tell(&mut self, node: String, other: i64) {
        let due = match &self.told {
            Some((told_node, told_lease, at)) => {
                *told_node != node || *told_lease != other || at.elapsed() >= RESEND
            }
            None => true,
        };
        if !due {
            return;
        }
        let notice = Notice::Takeover {
            node: node.clone(),
            lease: other,
            app: self.leases.app_name.clone(),
            user: self.user_id.to_owned(),
            session: self.session_id.to_owned(),
        };
        if let Err(error) = self.leases.notify(&notice).await {
            tracing::warn!(%error, "could not ask the other node to let go");
        }
        self.told = Some((node, other, Instant::now()));
    }

    /// How long to wait before the next look (a release notice cuts it short).
    fn pause(&self) -> Duration {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            POLL
        } else {
            left.min(POLL)
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
        lease: &Lease,
        grace: Duration,
    ) -> Result<i64, LeaseError> {
        let mut wait = Acquiring::new(self, user_id, session_id, lease, grace);
        loop {
            // Made before looking, so a release between the look and the wait is not missed.
            let released = self.released.notified();
            if let Some(outcome) = wait.attempt().await {
                return outcome;
            }
            tokio::select! {
                () = lease.taken_over.fired() => return Err(LeaseError::Superseded),
                _ = tokio::time::timeout(wait.pause(), released) => {}
            }
        }
    }

    async fn release(&self, user_id: &str, session_id: &str, lease: u64) {
        let lease = i64::try_from(lease).unwrap_or(i64::MAX);
        {
            let mut held = self.held();
            let key = (user_id.to_owned(), session_id.to_owned());
            if held.get(&key).is_some_and(|h| h.lease == lease) {
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
        .execute(&self.store)
        .await;
        if let Err(error) = released {
            // The row expires by itself.
            tracing::warn!(%error, "could not give a session lease back");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leases of node `n1` that never reach a server: what is tested here is in memory.
    fn leases() -> PgLeases {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://127.0.0.1:1/none")
            .unwrap();
        PgLeases {
            store: pool.clone(),
            pool,
            app_name: "app".into(),
            node: "n1".into(),
            ttl: Duration::from_secs(2),
            held: Mutex::new(HashMap::new()),
            early: Mutex::new(HashMap::new()),
            released: tokio::sync::Notify::new(),
            stop: Latch::new(),
        }
    }

    fn takeover(lease: i64) -> String {
        serde_json::to_string(&Notice::Takeover {
            node: "n1".into(),
            lease,
            app: "app".into(),
            user: "u".into(),
            session: "s".into(),
        })
        .unwrap()
    }

    fn held(lease: i64) -> (HeldLease, Latch) {
        let taken_over = Latch::new();
        let held = HeldLease {
            lease,
            taken_over: taken_over.clone(),
            store_lost: Latch::new(),
        };
        (held, taken_over)
    }

    /// The other node reads the row as soon as it is committed, so its notice can come before
    /// this node has registered the lease: it is kept, and fires on registration.
    #[tokio::test]
    async fn a_takeover_notice_that_overtakes_its_lease_is_kept_for_it() {
        let leases = leases();
        leases.on_notice(&takeover(7));
        let (other, other_fired) = held(6);
        leases.hold(("u".into(), "s".into()), other);
        assert!(!other_fired.is_fired(), "a notice is for one lease only");
        leases.held().clear();
        leases.on_notice(&takeover(7));
        let (lease, fired) = held(7);
        leases.hold(("u".into(), "s".into()), lease);
        assert!(fired.is_fired());
        let (later, later_fired) = held(8);
        leases.hold(("u".into(), "s".into()), later);
        assert!(!later_fired.is_fired(), "kept once, then gone");
    }

    /// A registered lease is fired by its notice, not by one for an older lease of this node.
    #[tokio::test]
    async fn a_takeover_notice_fires_the_lease_it_names() {
        let leases = leases();
        let (lease, fired) = held(3);
        leases.hold(("u".into(), "s".into()), lease);
        leases.on_notice(&takeover(2));
        assert!(!fired.is_fired());
        leases.on_notice(&takeover(3));
        assert!(fired.is_fired());
    }
}
