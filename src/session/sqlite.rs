//! SQLite session store: the default, a single durable file (WAL mode) under the data directory.
//!
//! Events are stored as their camelCase JSON and read back in insertion order (`seq`), not by
//! timestamp: `file_data` events for flushed audio carry the older timestamp of the audio they
//! reference, and ordering by timestamp would move them before events they followed.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use async_trait::async_trait;
use serde_json::{Map, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqliteConnection, SqlitePool};

use super::batch::{self, fail_all, settle_all, writer_gone, Batches, Queue};
use super::state::{merge_state, split_delta, ScopedDelta};
use super::{EventPage, Fence, GetSessionConfig, Session, SessionError, SessionService};
use crate::event::{now_timestamp, Event};

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sessions (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, id TEXT NOT NULL,
        state TEXT NOT NULL, create_time REAL NOT NULL, update_time REAL NOT NULL,
        PRIMARY KEY (app_name, user_id, id))",
    // `seq` is the rowid: SQLite gives a new row one more than the largest in the table, so
    // a session's events keep their order. Deleting the newest rows only frees numbers above
    // every row left. No AUTOINCREMENT: it keeps numbers from ever being reused, which this
    // order does not need, at the price of a write to `sqlite_sequence` in every transaction (a
    // one-event commit wrote 6.0 pages to the WAL with it, 5.4 without). Databases made with it
    // keep it and work the same.
    "CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL, app_name TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        invocation_id TEXT NOT NULL, author TEXT NOT NULL, timestamp REAL NOT NULL,
        event_json TEXT NOT NULL,
        UNIQUE (app_name, user_id, session_id, id))",
    "CREATE INDEX IF NOT EXISTS events_by_session ON events (app_name, user_id, session_id, seq)",
    // An appended event touches its session's update time in the same statement, so a plain
    // append is one round trip to SQLite's thread instead of two.
    "CREATE TRIGGER IF NOT EXISTS events_touch_session AFTER INSERT ON events BEGIN
        UPDATE sessions SET update_time = NEW.timestamp
        WHERE app_name = NEW.app_name AND user_id = NEW.user_id AND id = NEW.session_id;
     END",
    // The model's resumption handle, apart from the session row so databases made before it
    // need no column added.
    "CREATE TABLE IF NOT EXISTS resumption_handles (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, session_id TEXT NOT NULL,
        handle TEXT NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id))",
    "CREATE TABLE IF NOT EXISTS app_states (app_name TEXT PRIMARY KEY, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS user_states (
        app_name TEXT NOT NULL, user_id TEXT NOT NULL, state TEXT NOT NULL,
        PRIMARY KEY (app_name, user_id))",
];

/// WAL pages after which a commit copies the log back into the database (SQLite's default is
/// 1,000). Appends rewrite the same index pages of their sessions over and over; a checkpoint
/// copies each page once however often it changed, so a longer log (about 40 MB) copies far
/// less (`cargo bench --bench hot_paths -- sessions` shows it).
const WAL_AUTOCHECKPOINT_PAGES: u32 = 10_000;

/// Write transactions take the write lock up front: a deferred transaction that reads and then
/// writes fails with SQLITE_BUSY (without waiting) when another connection committed in between.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// Sessions in a SQLite file, durable across restarts.
#[derive(Debug, Clone)]
pub struct SqliteSessionService {
    /// Readers (WAL lets them run beside the writer).
    pool: SqlitePool,
    /// The one write connection, shared in turn by the append writer and by session creation
    /// and deletion: writes queue for it in order instead of starving in SQLite's busy handler.
    writer: SqlitePool,
    /// Appends go to one writer task that commits whatever is waiting in one transaction; the
    /// events one call hands over travel together, so they are committed together.
    appends: Queue<String>,
    /// Event rows decoded for readers.
    events_read: Arc<AtomicU64>,
}

/// Most appends the writer takes before it commits: a batch is at most one group short of twice
/// this (a group is taken whole), 511 rows of 9 parameters, within SQLite's 32,766.
const MAX_BATCH: usize = 256;

/// An event waiting for the writer, its JSON beside it.
type Append = batch::Append<String>;

fn parse_map(text: &str) -> Result<Map<String, Value>, SessionError> {
    Ok(serde_json::from_str(text)?)
}

impl SqliteSessionService {
    /// Opens (creating if needed) the database file, its parent folders and its schema.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SessionError> {
        let path = path.as_ref();
        if path.as_os_str().is_empty() {
            return Err(SessionError::InvalidArgument(
                "empty SQLite database path".into(),
            ));
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            tokio::fs::create_dir_all(parent).await.map_err(|e| {
                SessionError::InvalidArgument(format!("cannot create {}: {e}", parent.display()))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES.to_string());
        // No test on acquire: it is a round trip to the connection's thread that can only find
        // an in-process database alive, made before every batch of appends and every read.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        let mut tx = writer.begin_with(BEGIN_WRITE).await?;
        for statement in SCHEMA {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        let (appends, batches) = batch::queue(MAX_BATCH);
        tokio::spawn(write_appends(writer.clone(), batches));
        Ok(SqliteSessionService {
            pool,
            writer,
            appends,
            events_read: Arc::default(),
        })
    }
}

/// Reads the stored app and user state (prefixes not yet re-added).
async fn scoped_state(
    conn: &mut SqliteConnection,
    app_name: &str,
    user_id: &str,
) -> Result<(Map<String, Value>, Map<String, Value>), SessionError> {
    let app = sqlx::query("SELECT state FROM app_states WHERE app_name = ?")
        .bind(app_name)
        .fetch_optional(&mut *conn)
        .await?;
    let user = sqlx::query("SELECT state FROM user_states WHERE app_name = ? AND user_id = ?")
        .bind(app_name)
        .bind(user_id)
        .fetch_optional(&mut *conn)
        .await?;
    let app = match app {
        Some(row) => parse_map(row.try_get("state")?)?,
        None => Map::new(),
    };
    let user = match user {
        Some(row) => parse_map(row.try_get("state")?)?,
        None => Map::new(),
    };
    Ok((app, user))
}

/// Upserts the app and user parts of a split delta (inside the caller's transaction) and returns
/// the session part.
async fn apply_scoped(
    conn: &mut SqliteConnection,
    app_name: &str,
    user_id: &str,
    scoped: ScopedDelta,
) -> Result<Map<String, Value>, SessionError> {
    if scoped.app.is_empty() && scoped.user.is_empty() {
        return Ok(scoped.session);
    }
    let (mut app, mut user) = scoped_state(conn, app_name, user_id).await?;
    if !scoped.app.is_empty() {
        app.extend(scoped.app);
        sqlx::query(
            "INSERT INTO app_states (app_name, state) VALUES (?, ?)
             ON CONFLICT (app_name) DO UPDATE SET state = excluded.state",
        )
        .bind(app_name)
        .bind(serde_json::to_string(&app)?)
        .execute(&mut *conn)
        .await?;
    }
    if !scoped.user.is_empty() {
        user.extend(scoped.user);
        sqlx::query(
            "INSERT INTO user_states (app_name, user_id, state) VALUES (?, ?, ?)
             ON CONFLICT (app_name, user_id) DO UPDATE SET state = excluded.state",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(serde_json::to_string(&user)?)
        .execute(&mut *conn)
        .await?;
    }
    Ok(scoped.session)
}

/// The writer: takes the first waiting append and everything queued behind it (up to
/// `MAX_BATCH`), and commits them in one transaction; a bad append fails alone (see
/// `append_in`). Callers still wait for their commit: commit-before-yield holds.
async fn write_appends(pool: SqlitePool, mut batches: Batches<String>) {
    while let Some(batch) = batches.next().await {
        commit_batch(&pool, batch).await;
    }
}

async fn commit_batch(pool: &SqlitePool, batch: &mut Vec<Append>) {
    if batch.iter().all(|a| a.event.actions.state_delta.is_empty()) {
        // Plain appends only (the usual case): one multi-row INSERT, atomic by itself, so no
        // transaction to open and commit around it. One round trip to SQLite's thread in all.
        let inserted = match pool.acquire().await {
            Ok(mut conn) => insert_events(&mut conn, batch).await,
            Err(error) => Err(error.into()),
        };
        match inserted {
            Ok(outcomes) => settle_all(batch, outcomes),
            Err(error) => fail_all(batch, &error),
        }
        return;
    }
    // Some change state (every turn's end does: its usage totals). Still one INSERT for the
    // batch, and one state write per session, in one transaction; only if that fails (a
    // session gone, say) are the appends committed one by one, each failing alone.
    match commit_merged(pool, batch).await {
        Ok(outcomes) => {
            settle_all(batch, outcomes);
            return;
        }
        Err(error) => {
            tracing::debug!(%error, appends = batch.len(), "a batch failed whole; committing its appends one by one");
        }
    }
    let mut tx = match pool.begin_with(BEGIN_WRITE).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::error!(%error, appends = batch.len(), "cannot start a session write");
            fail_all(batch, &error);
            return;
        }
    };
    let mut outcomes = Vec::with_capacity(batch.len());
    for append in batch.iter() {
        outcomes.push(append_in(&mut tx, append).await);
    }
    match tx.commit().await {
        Ok(()) => settle_all(batch, outcomes),
        Err(error) => {
            tracing::error!(%error, appends = batch.len(), "committing session writes failed");
            fail_all(batch, &error);
        }
    }
}

/// Commits a batch whose appends change state in one transaction: one multi-row INSERT, then
/// the deltas of the events it stored merged per session (in order: a later key wins, as it
/// would applied one by one) and written once each. Any error rolls all of it back.
async fn commit_merged(
    pool: &SqlitePool,
    batch: &[Append],
) -> Result<Vec<Result<bool, SessionError>>, SessionError> {
    let mut tx = pool.begin_with(BEGIN_WRITE).await?;
    let outcomes = insert_events(&mut tx, batch).await?;
    let mut merged: Vec<(SessionKey<'_>, ScopedDelta)> = Vec::new();
    let mut index: HashMap<SessionKey<'_>, usize> = HashMap::new();
    for (append, outcome) in batch.iter().zip(&outcomes) {
        if !matches!(outcome, Ok(true)) || append.event.actions.state_delta.is_empty() {
            continue;
        }
        let scoped = split_delta(&append.event.actions.state_delta);
        let key = (
            append.app_name.as_str(),
            append.user_id.as_str(),
            append.session_id.as_str(),
        );
        match index.get(&key) {
            Some(&at) => {
                let into = &mut merged[at].1;
                into.app.extend(scoped.app);
                into.user.extend(scoped.user);
                into.session.extend(scoped.session);
            }
            None => {
                index.insert(key, merged.len());
                merged.push((key, scoped));
            }
        }
    }
    // The app and user parts (rare) one session at a time; the session parts, every turn's
    // end among them, in one read and one write for the whole batch: under load each round
    // trip to SQLite's thread waits for a CPU, and a batch touches hundreds of sessions.
    let mut sessions = Vec::with_capacity(merged.len());
    for ((app_name, user_id, session_id), scoped) in merged {
        let delta = apply_scoped(&mut tx, app_name, user_id, scoped).await?;
        if !delta.is_empty() {
            sessions.push(((app_name, user_id, session_id), delta));
        }
    }
    merge_session_states(&mut tx, sessions).await?;
    tx.commit().await?;
    Ok(outcomes)
}

/// Merges each session's delta into its stored state: one SELECT and one UPDATE for all of
/// them. A session missing fails the lot (the caller then commits one append at a time).
async fn merge_session_states(
    conn: &mut SqliteConnection,
    sessions: Vec<(SessionKey<'_>, Map<String, Value>)>,
) -> Result<(), SessionError> {
    if sessions.is_empty() {
        return Ok(());
    }
    let keys = vec!["(?, ?, ?)"; sessions.len()].join(", ");
    let sql = format!(
        "SELECT app_name, user_id, id, state FROM sessions
         WHERE (app_name, user_id, id) IN (VALUES {keys})"
    );
    let mut query = sqlx::query(&sql);
    for ((app_name, user_id, session_id), _) in &sessions {
        query = query.bind(*app_name).bind(*user_id).bind(*session_id);
    }
    let mut stored: HashMap<(String, String, String), String> = HashMap::new();
    for row in query.fetch_all(&mut *conn).await? {
        let key = (
            row.try_get("app_name")?,
            row.try_get("user_id")?,
            row.try_get("id")?,
        );
        stored.insert(key, row.try_get("state")?);
    }
    let mut states = Vec::with_capacity(sessions.len());
    for ((app_name, user_id, session_id), delta) in sessions {
        let key = (
            app_name.to_owned(),
            user_id.to_owned(),
            session_id.to_owned(),
        );
        let Some(text) = stored.get(&key) else {
            return Err(SessionError::NotFound(session_id.to_owned()));
        };
        let mut state = parse_map(text)?;
        state.extend(delta);
        states.push((key, serde_json::to_string(&state)?));
    }
    let rows = vec!["(?, ?, ?, ?)"; states.len()].join(", ");
    let sql = format!(
        "UPDATE sessions SET state = v.column4 FROM (VALUES {rows}) AS v
         WHERE sessions.app_name = v.column1 AND sessions.user_id = v.column2
           AND sessions.id = v.column3"
    );
    let mut query = sqlx::query(&sql);
    for ((app_name, user_id, session_id), state) in states {
        query = query
            .bind(app_name)
            .bind(user_id)
            .bind(session_id)
            .bind(state);
    }
    query.execute(&mut *conn).await?;
    Ok(())
}

/// A session's app, user and id.
type SessionKey<'a> = (&'a str, &'a str, &'a str);

/// One append inside the writer's transaction, failing alone: `Ok(false)` if the event was
/// already stored. Most events change no state and are a single statement, atomic by itself;
/// the rest run inside a savepoint so a failure halfway is rolled back.
// Boxed with an explicit `Send`: rustc cannot prove the unboxed future `Send` for every lifetime
// of the connection borrow when the writer task is spawned.
fn append_in<'a>(
    conn: &'a mut SqliteConnection,
    append: &'a Append,
) -> BoxFuture<'a, Result<bool, SessionError>> {
    Box::pin(async move {
        let scoped = split_delta(&append.event.actions.state_delta);
        if scoped.is_empty() {
            return insert_one(conn, append).await;
        }
        sqlx::query("SAVEPOINT append").execute(&mut *conn).await?;
        let result = match insert_one(conn, append).await {
            Ok(true) => apply_session_delta(
                conn,
                &append.app_name,
                &append.user_id,
                &append.session_id,
                scoped,
            )
            .await
            .map(|()| true),
            other => other,
        };
        if result.is_err() {
            sqlx::query("ROLLBACK TO append")
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query("RELEASE append").execute(&mut *conn).await?;
        result
    })
}

/// Inserts events in one statement, each only if its session exists (the trigger touches the
/// sessions' times): per event `Ok(false)` if it was already stored, `NotFound` without a
/// session. The outer error is the statement's, which failed them all.
async fn insert_events(
    conn: &mut SqliteConnection,
    appends: &[Append],
) -> Result<Vec<Result<bool, SessionError>>, SessionError> {
    let rows = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?)"; appends.len()].join(", ");
    // `column9` keeps the batch's order in `seq`.
    let sql = format!(
        "INSERT INTO events
         (id, app_name, user_id, session_id, invocation_id, author, timestamp, event_json)
         SELECT column1, column2, column3, column4, column5, column6, column7, column8
         FROM (VALUES {rows}) AS v
         WHERE EXISTS (SELECT 1 FROM sessions
             WHERE app_name = v.column2 AND user_id = v.column3 AND id = v.column4)
         ORDER BY column9
         ON CONFLICT (app_name, user_id, session_id, id) DO NOTHING
         RETURNING app_name, user_id, session_id, id"
    );
    let mut query = sqlx::query(&sql);
    for (index, append) in appends.iter().enumerate() {
        query = query
            .bind(&append.event.id)
            .bind(&append.app_name)
            .bind(&append.user_id)
            .bind(&append.session_id)
            .bind(&append.event.invocation_id)
            .bind(&append.event.author)
            .bind(append.event.timestamp)
            .bind(&append.encoded)
            .bind(index as i64);
    }
    let mut inserted: HashSet<(String, String, String, String)> = query
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .filter_map(|row| {
            Some((
                row.try_get("app_name").ok()?,
                row.try_get("user_id").ok()?,
                row.try_get("session_id").ok()?,
                row.try_get("id").ok()?,
            ))
        })
        .collect();
    let mut outcomes = Vec::with_capacity(appends.len());
    for append in appends {
        let key = (
            append.app_name.clone(),
            append.user_id.clone(),
            append.session_id.clone(),
            append.event.id.clone(),
        );
        // Removed once matched: the same event twice in a batch is stored once.
        outcomes.push(if inserted.remove(&key) {
            Ok(true)
        } else {
            not_inserted(conn, append).await
        });
    }
    Ok(outcomes)
}

/// One event through `insert_events`.
async fn insert_one(conn: &mut SqliteConnection, append: &Append) -> Result<bool, SessionError> {
    let mut outcomes = insert_events(conn, std::slice::from_ref(append)).await?;
    outcomes.pop().unwrap_or(Ok(false))
}

/// Why an event was not inserted: a re-delivery (which changes nothing), or no such session.
async fn not_inserted(conn: &mut SqliteConnection, append: &Append) -> Result<bool, SessionError> {
    let exists =
        sqlx::query("SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?")
            .bind(&append.app_name)
            .bind(&append.user_id)
            .bind(&append.session_id)
            .fetch_optional(&mut *conn)
            .await?;
    match exists {
        Some(_) => Ok(false),
        None => Err(SessionError::NotFound(append.session_id.clone())),
    }
}

/// Applies a freshly inserted event's state delta: app and user parts to their tables, the
/// session part merged into the session's state (as a batch's are, for one session).
async fn apply_session_delta(
    conn: &mut SqliteConnection,
    app_name: &str,
    user_id: &str,
    session_id: &str,
    scoped: ScopedDelta,
) -> Result<(), SessionError> {
    let session_delta = apply_scoped(conn, app_name, user_id, scoped).await?;
    if session_delta.is_empty() {
        return Ok(());
    }
    merge_session_states(conn, vec![((app_name, user_id, session_id), session_delta)]).await
}

#[async_trait]
impl SessionService for SqliteSessionService {
    async fn create_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<Session, SessionError> {
        let id = super::session_id_or_new(session_id);
        let now = now_timestamp();
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let exists =
            sqlx::query("SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?")
                .bind(app_name)
                .bind(user_id)
                .bind(&id)
                .fetch_optional(&mut *tx)
                .await?;
        if exists.is_some() {
            return Err(SessionError::AlreadyExists(id));
        }
        let session_state = apply_scoped(&mut tx, app_name, user_id, split_delta(&state)).await?;
        sqlx::query(
            "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(&id)
        .bind(serde_json::to_string(&session_state)?)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let (app, user) = scoped_state(&mut tx, app_name, user_id).await?;
        tx.commit().await?;
        Ok(Session {
            app_name: app_name.to_owned(),
            user_id: user_id.to_owned(),
            id,
            state: merge_state(&app, &user, &session_state),
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
        // One read transaction, so state and events come from the same snapshot.
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "SELECT state, update_time FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let session_state = parse_map(row.try_get("state")?)?;
        let last_update_time: f64 = row.try_get("update_time")?;
        // The newest N (LIMIT -1 is unbounded), returned oldest first.
        let limit = config
            .num_recent_events
            .map_or(-1, |n| i64::try_from(n).unwrap_or(-1));
        let rows = sqlx::query(
            "SELECT event_json FROM (
                 SELECT seq, event_json FROM events
                 WHERE app_name = ? AND user_id = ? AND session_id = ? AND timestamp >= ?
                 ORDER BY seq DESC LIMIT ?)
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
        let count: i64 =
            sqlx::query_scalar("SELECT count(*) FROM sessions WHERE app_name = ? AND user_id = ?")
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
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(
            "SELECT id, state, update_time FROM sessions WHERE app_name = ? AND user_id = ?
             ORDER BY update_time DESC, id",
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
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        sqlx::query("DELETE FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?")
            .bind(app_name)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?")
            .bind(app_name)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM resumption_handles WHERE app_name = ? AND user_id = ? AND session_id = ?",
        )
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
        batch::append_events(session, events, &self.appends, MAX_BATCH, |event| {
            Ok(serde_json::to_string(event)?)
        })
        .await
    }

    async fn resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<Option<String>, SessionError> {
        Ok(sqlx::query_scalar(
            "SELECT handle FROM resumption_handles
             WHERE app_name = ? AND user_id = ? AND session_id = ?",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn set_resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        handle: Option<&str>,
        // One process: no other node to fence out.
        _fence: &Fence,
    ) -> Result<(), SessionError> {
        let query = match handle {
            // Only while the session exists.
            Some(handle) => sqlx::query(
                "INSERT INTO resumption_handles (app_name, user_id, session_id, handle)
                 SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM sessions
                     WHERE app_name = ?1 AND user_id = ?2 AND id = ?3)
                 ON CONFLICT (app_name, user_id, session_id) DO UPDATE SET handle = excluded.handle",
            )
            .bind(app_name)
            .bind(user_id)
            .bind(session_id)
            .bind(handle),
            None => sqlx::query(
                "DELETE FROM resumption_handles
                 WHERE app_name = ? AND user_id = ? AND session_id = ?",
            )
            .bind(app_name)
            .bind(user_id)
            .bind(session_id),
        };
        query.execute(&self.writer).await?;
        Ok(())
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
        let mut tx = self.pool.begin().await?;
        let exists =
            sqlx::query("SELECT 1 FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?")
                .bind(app_name)
                .bind(user_id)
                .bind(session_id)
                .fetch_optional(&mut *tx)
                .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let total: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?",
        )
        .bind(app_name)
        .bind(user_id)
        .bind(session_id)
        .fetch_one(&mut *tx)
        .await?;
        let rows = sqlx::query(
            "SELECT event_json FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?
             ORDER BY seq LIMIT ? OFFSET ?",
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
        // A row written and removed in one committed transaction: the commit has to reach the
        // log on disk, which a full disk or a read-only file refuses; readers never see it.
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        sqlx::query("INSERT OR REPLACE INTO app_states (app_name, state) VALUES (?, '{}')")
            .bind(READY_PROBE)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM app_states WHERE app_name = ?")
            .bind(READY_PROBE)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The app name of `/readyz`'s write probe: a slash is never in a real app name.
const READY_PROBE: &str = "/livegate/ready-probe";

impl SqliteSessionService {
    fn count_read(&self, events: usize) {
        self.events_read
            .fetch_add(u64::try_from(events).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database made by a build whose `events.seq` was AUTOINCREMENT opens and keeps order.
    #[tokio::test]
    async fn a_database_with_the_older_events_table_still_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true);
        let old = SqlitePool::connect_with(options).await.unwrap();
        sqlx::query(
            "CREATE TABLE events (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL, app_name TEXT NOT NULL, user_id TEXT NOT NULL,
                session_id TEXT NOT NULL, invocation_id TEXT NOT NULL, author TEXT NOT NULL,
                timestamp REAL NOT NULL, event_json TEXT NOT NULL,
                UNIQUE (app_name, user_id, session_id, id))",
        )
        .execute(&old)
        .await
        .unwrap();
        old.close().await;

        let store = SqliteSessionService::open(&path).await.unwrap();
        let mut session = store
            .create_session("app", "u", Some("s"), Map::new())
            .await
            .unwrap();
        let mut ids = Vec::new();
        for timestamp in [3.0, 1.0, 2.0] {
            let mut event = Event::new("e-1", "user");
            event.timestamp = timestamp;
            ids.push(store.append_event(&mut session, event).await.unwrap().id);
        }
        let read = store
            .get_session("app", "u", "s", &GetSessionConfig::default())
            .await
            .unwrap()
            .unwrap();
        let read: Vec<String> = read.events.into_iter().map(|e| e.id).collect();
        assert_eq!(read, ids);
        let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE name = 'events'")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert!(sql.contains("AUTOINCREMENT"), "left as it was: {sql}");
    }

    /// Every connection, the writer's above all (it runs the checkpoints), uses the longer log.
    #[tokio::test]
    async fn connections_checkpoint_after_the_longer_wal() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteSessionService::open(dir.path().join("s.db"))
            .await
            .unwrap();
        for pool in [&store.writer, &store.pool] {
            let pages: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(pages, i64::from(WAL_AUTOCHECKPOINT_PAGES));
        }
    }
}
