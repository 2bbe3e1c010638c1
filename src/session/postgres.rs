//! PostgreSQL session store: one database shared by every gateway node of a deployment.
//!
//! Each session row carries the next number of its event sequence. Appending an event takes the
//! number in the same statement that stores the event, under the session row's lock, so a
//! session's events read back in commit order whichever node committed them. State deltas are
//! merged in that statement too (`state || delta`, JSONB), so a `/run` turn and a live run on
//! the same session never overwrite each other's keys with a stale copy.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Row};

use super::batch::{self, fail_all, settle_all, writer_gone, Batches, Queue};
use super::state::{merge_state, split_delta};
use super::{EventPage, Fence, GetSessionConfig, Session, SessionError, SessionService};
use crate::event::{now_timestamp, Event};

/// Versioned schema changes, applied in order once each. Never edit a released one: add the next.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE sessions (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, id TEXT NOT NULL,
        state JSONB NOT NULL, create_time DOUBLE PRECISION NOT NULL,
        update_time DOUBLE PRECISION NOT NULL,
        next_seq BIGINT NOT NULL DEFAULT 0,
        resumption_handle TEXT,
        PRIMARY KEY (app_name, user_id, id));
     CREATE INDEX sessions_by_update ON sessions (app_name, user_id, update_time DESC);
     CREATE TABLE events (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        seq BIGINT NOT NULL, id TEXT NOT NULL, invocation_id TEXT NOT NULL,
        author TEXT NOT NULL, timestamp DOUBLE PRECISION NOT NULL, event_json TEXT NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id, seq),
        UNIQUE (app_name, user_id, session_id, id));
     CREATE TABLE app_states (app_name TEXT PRIMARY KEY, state JSONB NOT NULL);
     CREATE TABLE user_states (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, state JSONB NOT NULL,
        PRIMARY KEY (app_name, user_id));
     CREATE TABLE session_leases (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        node TEXT NOT NULL, lease BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id));
     CREATE INDEX session_leases_by_node ON session_leases (node);",
    ),
    (
        2,
        // Fencing: every take of a lease draws a new epoch; a session row keeps the highest
        // epoch a run claimed it with, and fenced writes need theirs to be it.
        "CREATE SEQUENCE session_lease_epochs;
     ALTER TABLE session_leases ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
     ALTER TABLE sessions ADD COLUMN lease_epoch BIGINT;",
    ),
];

/// The advisory lock nodes take around migrations, so nodes starting together apply each once.
const MIGRATION_LOCK: i64 = 0x6c69_7665_6761_7465; // "livegate"

/// Writer tasks per node: each commits its own batches on its own connection; a session always
/// goes to the same one, which keeps its appends in order.
const WRITERS: usize = 4;

/// Most appends a writer commits in one transaction.
const MAX_BATCH: usize = 256;

/// Times a batch is retried after PostgreSQL aborted it to break a deadlock (two nodes' batches
/// locking the same rows in other orders); nothing of an aborted batch was committed.
const DEADLOCK_RETRIES: usize = 3;

/// Connections per node for the sessions: the writers and reads (the leases have their own).
const MAX_CONNECTIONS: u32 = 22;

/// Stores one event (with its state delta) if its session exists, it is not already there and
/// the fence (`$12`, none for an unfenced write) is the session's: checked on the session row
/// the statement locks, so a claim by a newer lease waits for it, or it for the claim.
const APPEND: &str = "
WITH s AS (
    UPDATE sessions SET next_seq = next_seq + 1, update_time = $7, state = state || $9::jsonb
    WHERE app_name = $1 AND user_id = $2 AND id = $3
      AND ($12::bigint IS NULL OR lease_epoch = $12)
      AND NOT EXISTS (SELECT 1 FROM events
          WHERE app_name = $1 AND user_id = $2 AND session_id = $3 AND id = $4)
    RETURNING next_seq),
e AS (
    INSERT INTO events
        (app_name, user_id, session_id, seq, id, invocation_id, author, timestamp, event_json)
    SELECT $1, $2, $3, next_seq, $4, $5, $6, $7, $8 FROM s
    ON CONFLICT DO NOTHING RETURNING 1),
a AS (
    INSERT INTO app_states (app_name, state) SELECT $1, $10::jsonb FROM s
    WHERE $10::jsonb <> '{}'::jsonb
    ON CONFLICT (app_name) DO UPDATE SET state = app_states.state || excluded.state),
u AS (
    INSERT INTO user_states (app_name, user_id, state) SELECT $1, $2, $11::jsonb FROM s
    WHERE $11::jsonb <> '{}'::jsonb
    ON CONFLICT (app_name, user_id) DO UPDATE SET state = user_states.state || excluded.state)
SELECT (SELECT count(*) FROM e) AS stored,
       EXISTS (SELECT 1 FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3) AS found,
       EXISTS (SELECT 1 FROM events
           WHERE app_name = $1 AND user_id = $2 AND session_id = $3 AND id = $4) AS duplicate";

/// Sessions in PostgreSQL, shared by every node.
#[derive(Debug, Clone)]
pub struct PostgresSessionService {
    pool: PgPool,
    writers: Vec<Queue<Encoded>>,
    /// Events read back so far (`livegate_session_events_read_total`).
    events_read: Arc<AtomicU64>,
}

/// What a writer stores beside an event: its JSON, its state delta by scope (session, app,
/// user, as JSON), and the run's fencing token if the write is fenced.
#[derive(Debug)]
struct Encoded {
    json: String,
    deltas: [String; 3],
    fence: Option<i64>,
}

/// An event waiting for a writer.
type Append = batch::Append<Encoded>;

fn parse_map(text: &str) -> Result<Map<String, Value>, SessionError> {
    Ok(serde_json::from_str(text)?)
}

impl PostgresSessionService {
    /// Connects (`postgres://` or `postgresql://` URL, libpq's parameters) and brings the schema
    /// up to date.
    pub async fn open(url: &str) -> Result<Self, SessionError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e| SessionError::InvalidArgument(format!("invalid PostgreSQL URL: {e}")))?;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        migrate(&pool).await?;
        let writers = (0..WRITERS)
            .map(|_| {
                let (queue, batches) = batch::queue(MAX_BATCH);
                tokio::spawn(write_appends(pool.clone(), batches));
                queue
            })
            .collect();
        Ok(PostgresSessionService {
            pool,
            writers,
            events_read: Arc::default(),
        })
    }

    /// The connection pool (the gateway's session leases share it).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn count_read(&self, events: usize) {
        self.events_read
            .fetch_add(u64::try_from(events).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn writer_for(&self, app_name: &str, user_id: &str, session_id: &str) -> &Queue<Encoded> {
        let mut hasher = DefaultHasher::new();
        (app_name, user_id, session_id).hash(&mut hasher);
        &self.writers[(hasher.finish() % self.writers.len() as u64) as usize]
    }
}

/// Applies the migrations not yet applied, under a transaction-level advisory lock: a node that
/// starts while another migrates waits, then finds the work done.
async fn migrate(pool: &PgPool) -> Result<(), SessionError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS livegate_migrations (
            version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(&mut *tx)
    .await?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM livegate_migrations")
        .fetch_all(&mut *tx)
        .await?;
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tracing::info!(version, "applying session store migration");
        sqlx::raw_sql(sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO livegate_migrations (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await?;
    }
    if let Some(newer) = applied
        .iter()
        .find(|v| !MIGRATIONS.iter().any(|(m, _)| m == *v))
    {
        tracing::warn!(
            version = newer,
            "the database has a migration this build does not know"
        );
    }
    tx.commit().await?;
    Ok(())
}

/// A writer: takes the first waiting append and everything queued behind it (up to
/// `MAX_BATCH`) and commits them in one transaction. Callers wait for their commit.
async fn write_appends(pool: PgPool, mut batches: Batches<Encoded>) {
    while let Some(batch) = batches.next().await {
        commit_batch(&pool, batch).await;
    }
}

/// True for the errors PostgreSQL raises to break a deadlock or a serialization conflict.
fn is_retryable(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "40P01" || code == "40001")
}

async fn commit_batch(pool: &PgPool, batch: &mut Vec<Append>) {
    // Sessions in one order on every node (a stable sort keeps each session's own order), so
    // two batches lock session rows in the same order.
    batch.sort_by(|a, b| {
        (&a.app_name, &a.user_id, &a.session_id).cmp(&(&b.app_name, &b.user_id, &b.session_id))
    });
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        match try_commit(pool, batch).await {
            Err(error) if attempt <= DEADLOCK_RETRIES && is_retryable(&error) => {
                tracing::debug!(%error, attempt, "session batch aborted; retrying");
            }
            other => break other,
        }
    };
    match result {
        Ok(outcomes) => settle_all(batch, outcomes),
        Err(error) => {
            tracing::error!(%error, appends = batch.len(), "committing session writes failed");
            fail_all(batch, &error);
        }
    }
}

/// One transaction for the batch: per append `Ok(true)` stored, `Ok(false)` already there,
/// `NotFound` without its session.
async fn try_commit(
    pool: &PgPool,
    batch: &[Append],
) -> Result<Vec<Result<bool, SessionError>>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for append in batch {
        outcomes.push(append_in(&mut tx, append).await?);
    }
    tx.commit().await?;
    Ok(outcomes)
}

async fn append_in(
    conn: &mut PgConnection,
    append: &Append,
) -> Result<Result<bool, SessionError>, sqlx::Error> {
    let [session_delta, app_delta, user_delta] = &append.encoded.deltas;
    let row = sqlx::query(APPEND)
        .bind(&append.app_name)
        .bind(&append.user_id)
        .bind(&append.session_id)
        .bind(&append.event.id)
        .bind(&append.event.invocation_id)
        .bind(&append.event.author)
        .bind(append.event.timestamp)
        .bind(&append.encoded.json)
        .bind(session_delta)
        .bind(app_delta)
        .bind(user_delta)
        .bind(append.encoded.fence)
        .fetch_one(&mut *conn)
        .await?;
    let stored: i64 = row.try_get("stored")?;
    let found: bool = row.try_get("found")?;
    let duplicate: bool = row.try_get("duplicate")?;
    Ok(if stored > 0 {
        Ok(true)
    } else if !found {
        Err(SessionError::NotFound(append.session_id.clone()))
    } else if duplicate || append.encoded.fence.is_none() {
        Ok(false)
    } else {
        Err(SessionError::Fenced(append.session_id.clone()))
    })
}

/// Reads the stored app and user state (prefixes not yet re-added).
async fn scoped_state(
    conn: &mut PgConnection,
    app_name: &str,
    user_id: &str,
) -> Result<(Map<String, Value>, Map<String, Value>), SessionError> {
    let row = sqlx::query(
        "SELECT (SELECT state::text FROM app_states WHERE app_name = $1) AS app,
                (SELECT state::text FROM user_states WHERE app_name = $1 AND user_id = $2) AS usr",
    )
    .bind(app_name)
    .bind(user_id)
    .fetch_one(&mut *conn)
    .await?;
    let app: Option<String> = row.try_get("app")?;
    let user: Option<String> = row.try_get("usr")?;
    let parse = |text: Option<String>| text.map_or(Ok(Map::new()), |t| parse_map(&t));
    Ok((parse(app)?, parse(user)?))
}

#[async_trait]
impl SessionService for PostgresSessionService {
    async fn create_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<Session, SessionError> {
        let id = super::session_id_or_new(session_id);
        let now = now_timestamp();
        let scoped = split_delta(&state);
        let mut tx = self.pool.begin().await?;
        let created = sqlx::query(
            "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)
             VALUES ($1, $2, $3, $4::jsonb, $5, $5) ON CONFLICT DO NOTHING RETURNING 1",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(&id)
        .bind(serde_json::to_string(&scoped.session)?)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        if created.is_none() {
            return Err(SessionError::AlreadyExists(id));
        }
        if !scoped.app.is_empty() {
            sqlx::query(
                "INSERT INTO app_states (app_name, state) VALUES ($1, $2::jsonb)
                 ON CONFLICT (app_name) DO UPDATE SET state = app_states.state || excluded.state",
            )
            .bind(app_name)
            .bind(serde_json::to_string(&scoped.app)?)
            .execute(&mut *tx)
            .await?;
        }
        if !scoped.user.is_empty() {
            sqlx::query(
                "INSERT INTO user_states (app_name, user_id, state) VALUES ($1, $2, $3::jsonb)
                 ON CONFLICT (app_name, user_id)
                 DO UPDATE SET state = user_states.state || excluded.state",
            )
            .bind(app_name)
            .bind(user_id)
            .bind(serde_json::to_string(&scoped.user)?)
            .execute(&mut *tx)
            .await?;
        }
        let (app, user) = scoped_state(&mut tx, app_name, user_id).await?;
        tx.commit().await?;
        Ok(Session {
            app_name: app_name.to_owned(),
            user_id: user_id.to_owned(),
            id,
            state: merge_state(&app, &user, &scoped.session),
            events: Vec::new(),
            last_update_time: now,
            fence: Fence::none(),
        })
    }

    async fn get_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        config: &GetSessionConfig,
    ) -> Result<Option<Session>, SessionError> {
        // One snapshot for state and events.
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let row = sqlx::query(
            "SELECT state::text AS state, update_time FROM sessions
             WHERE app_name = $1 AND user_id = $2 AND id = $3",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let session_state = parse_map(row.try_get("state")?)?;
        let last_update_time: f64 = row.try_get("update_time")?;
        // The newest N (LIMIT NULL is unbounded), returned oldest first.
        let limit = config
            .num_recent_events
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = sqlx::query(
            "SELECT event_json FROM (
                 SELECT seq, event_json FROM events
                 WHERE app_name = $1 AND user_id = $2 AND session_id = $3 AND timestamp >= $4
                 ORDER BY seq DESC LIMIT $5) AS recent
             ORDER BY seq",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(config.after_timestamp.unwrap_or(f64::NEG_INFINITY))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let events = rows
            .iter()
            .map(|r| Ok(serde_json::from_str::<Event>(r.try_get("event_json")?)?))
            .collect::<Result<Vec<Event>, SessionError>>()?;
        self.count_read(events.len());
        let (app, user) = scoped_state(&mut tx, app_name, user_id).await?;
        tx.commit().await?;
        Ok(Some(Session {
            app_name: app_name.to_owned(),
            user_id: user_id.to_owned(),
            id: session_id.to_owned(),
            state: merge_state(&app, &user, &session_state),
            events,
            last_update_time,
            fence: Fence::none(),
        }))
    }

    async fn count_sessions(&self, app_name: &str, user_id: &str) -> Result<usize, SessionError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sessions WHERE app_name = $1 AND user_id = $2",
        )
        .bind(app_name)
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn list_sessions(
        &self,
        app_name: &str,
        user_id: &str,
    ) -> Result<Vec<Session>, SessionError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let rows = sqlx::query(
            "SELECT id, state::text AS state, update_time FROM sessions
             WHERE app_name = $1 AND user_id = $2 ORDER BY update_time DESC, id",
        )
        .bind(app_name)
        .bind(user_id)
        .fetch_all(&mut *tx)
        .await?;
        let (app, user) = scoped_state(&mut tx, app_name, user_id).await?;
        tx.commit().await?;
        rows.iter()
            .map(|row| {
                Ok(Session {
                    app_name: app_name.to_owned(),
                    user_id: user_id.to_owned(),
                    id: row.try_get("id")?,
                    state: merge_state(&app, &user, &parse_map(row.try_get("state")?)?),
                    events: Vec::new(),
                    last_update_time: row.try_get("update_time")?,
                    fence: Fence::none(),
                })
            })
            .collect()
    }

    async fn delete_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<(), SessionError> {
        let mut tx = self.pool.begin().await?;
        // The session row first: its lock keeps an append from slipping in between.
        sqlx::query("DELETE FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3")
            .bind(app_name)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM events WHERE app_name = $1 AND user_id = $2 AND session_id = $3")
            .bind(app_name)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn append_event(
        &self,
        session: &mut Session,
        event: Event,
    ) -> Result<Event, SessionError> {
        let mut outcomes = self.append_events(session, vec![event]).await;
        outcomes.pop().unwrap_or(Err(writer_gone()))
    }

    async fn append_events(
        &self,
        session: &mut Session,
        events: Vec<Event>,
    ) -> Vec<Result<Event, SessionError>> {
        let fence = session.fence.epoch();
        let writer = self.writer_for(&session.app_name, &session.user_id, &session.id);
        batch::append_events(session, events, writer, MAX_BATCH, |event| {
            let scoped = split_delta(&event.actions.state_delta);
            Ok(Encoded {
                json: serde_json::to_string(event)?,
                deltas: [
                    serde_json::to_string(&scoped.session)?,
                    serde_json::to_string(&scoped.app)?,
                    serde_json::to_string(&scoped.user)?,
                ],
                fence,
            })
        })
        .await
    }

    async fn resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<Option<String>, SessionError> {
        let handle: Option<Option<String>> = sqlx::query_scalar(
            "SELECT resumption_handle FROM sessions
             WHERE app_name = $1 AND user_id = $2 AND id = $3",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(handle.flatten())
    }

    async fn set_resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        handle: Option<&str>,
        fence: &Fence,
    ) -> Result<(), SessionError> {
        let row = sqlx::query(
            "WITH w AS (
                 UPDATE sessions SET resumption_handle = $4
                 WHERE app_name = $1 AND user_id = $2 AND id = $3
                   AND ($5::bigint IS NULL OR lease_epoch = $5)
                 RETURNING 1)
             SELECT EXISTS (SELECT 1 FROM w) AS written,
                    EXISTS (SELECT 1 FROM sessions
                        WHERE app_name = $1 AND user_id = $2 AND id = $3) AS found",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(handle)
        .bind(fence.epoch())
        .fetch_one(&self.pool)
        .await?;
        let written: bool = row.try_get("written")?;
        let found: bool = row.try_get("found")?;
        if !written && found && fence.epoch().is_some() {
            fence.refuse();
            return Err(SessionError::Fenced(session_id.to_owned()));
        }
        Ok(())
    }

    async fn claim(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        fence: &Fence,
    ) -> Result<(), SessionError> {
        let Some(epoch) = fence.epoch() else {
            return Ok(());
        };
        // Epochs only grow: a claim never hands the session back to an older lease.
        let row = sqlx::query(
            "WITH c AS (
                 UPDATE sessions SET lease_epoch = $4
                 WHERE app_name = $1 AND user_id = $2 AND id = $3
                   AND (lease_epoch IS NULL OR lease_epoch <= $4)
                 RETURNING 1)
             SELECT EXISTS (SELECT 1 FROM c) AS claimed,
                    EXISTS (SELECT 1 FROM sessions
                        WHERE app_name = $1 AND user_id = $2 AND id = $3) AS found",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(epoch)
        .fetch_one(&self.pool)
        .await?;
        let claimed: bool = row.try_get("claimed")?;
        let found: bool = row.try_get("found")?;
        match (claimed, found) {
            (true, _) => Ok(()),
            (false, false) => Err(SessionError::NotFound(session_id.to_owned())),
            (false, true) => {
                fence.refuse();
                Err(SessionError::Fenced(session_id.to_owned()))
            }
        }
    }

    async fn ping(&self) -> Result<(), SessionError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn list_events(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Option<EventPage>, SessionError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let total: Option<i64> = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM events
                     WHERE app_name = $1 AND user_id = $2 AND session_id = $3)
             FROM sessions WHERE app_name = $1 AND user_id = $2 AND id = $3",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(total) = total else {
            return Ok(None);
        };
        let rows = sqlx::query(
            "SELECT event_json FROM events WHERE app_name = $1 AND user_id = $2 AND session_id = $3
             ORDER BY seq LIMIT $4 OFFSET $5",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(i64::try_from(offset).unwrap_or(i64::MAX))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let events = rows
            .iter()
            .map(|r| Ok(serde_json::from_str::<Event>(r.try_get("event_json")?)?))
            .collect::<Result<Vec<Event>, SessionError>>()?;
        self.count_read(events.len());
        Ok(Some(EventPage {
            events,
            total: usize::try_from(total).unwrap_or(0),
        }))
    }

    fn events_read(&self) -> u64 {
        self.events_read.load(Ordering::Relaxed)
    }

    async fn check_writable(&self) -> Result<(), SessionError> {
        // A row written and removed in one committed transaction: a read-only server (a
        // standby after a failover) refuses the write, a full disk the commit.
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO app_states (app_name, state) VALUES ($1, '{}'::jsonb)
             ON CONFLICT (app_name) DO NOTHING",
        )
        .bind(READY_PROBE)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM app_states WHERE app_name = $1")
            .bind(READY_PROBE)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The app name of `/readyz`'s write probe: a slash is never in a real app name.
const READY_PROBE: &str = "/livegate/ready-probe";
