//! The reconnecting core shared by [`CommitStream`](crate::CommitStream) and
//! [`RowStream`](crate::RowStream): one feed call at a time, a resume cursor, backoff.
//!
//! The cursor is the last seq the *consumer* has been handed (or that a heartbeat reported
//! as covered). A new call asks for `after = cursor`, so a break anywhere — server restart,
//! `kill -9`, a dropped connection, a stall — neither loses nor repeats an event.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::client::Client;
use crate::error::{Disposition, Error, Result, classify};
use crate::subscription::Cursor;
use crate::wire::{Broken, Exchange, Message};

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const NONE: i64 = -1;

/// What a stream's owner can read while the stream runs (from any thread).
#[derive(Debug)]
pub(crate) struct Progress {
    position: AtomicI64,
    heartbeat_head: AtomicI64,
    log_start: AtomicI64,
    reconnects: AtomicU64,
}

impl Progress {
    fn load(value: &AtomicI64) -> Option<i64> {
        Some(value.load(Ordering::Acquire)).filter(|v| *v != NONE)
    }

    pub(crate) fn position(&self) -> Option<i64> {
        Self::load(&self.position)
    }

    pub(crate) fn heartbeat_head(&self) -> Option<i64> {
        Self::load(&self.heartbeat_head)
    }

    pub(crate) fn log_start(&self) -> Option<i64> {
        Self::load(&self.log_start)
    }

    pub(crate) fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Acquire)
    }
}

/// The parameters of one feed subscription, fixed for its lifetime.
pub(crate) struct Spec {
    pub(crate) feed: &'static str,
    pub(crate) tables: Vec<String>,
    pub(crate) heartbeat: Duration,
    pub(crate) stall_timeout: Option<Duration>,
}

pub(crate) struct Feed {
    client: Client,
    spec: Spec,
    /// The cursor as asked for, until the first hello turns it into a seq.
    named: Cursor,
    /// The resume cursor (see the module docs); `None` until the first hello.
    position: Option<i64>,
    exchange: Option<Exchange>,
    backoff: Duration,
    /// Whether we logged in again since the last hello (so a refused login is not looped).
    relogged: bool,
    /// Incremented on every new call: the rows stream uses it to spot a reconnect.
    pub(crate) generation: u64,
    progress: Arc<Progress>,
}

impl Feed {
    /// Open the first call and wait for its hello; errors the stream can never get past
    /// (bad subscription, credentials, expired cursor) are returned here.
    pub(crate) async fn start(client: Client, spec: Spec, after: Cursor) -> Result<Feed> {
        let progress = Arc::new(Progress {
            position: AtomicI64::new(NONE),
            heartbeat_head: AtomicI64::new(NONE),
            log_start: AtomicI64::new(NONE),
            reconnects: AtomicU64::new(0),
        });
        let mut feed = Feed {
            client,
            spec,
            named: after,
            position: None,
            exchange: None,
            backoff: FIRST_BACKOFF,
            relogged: false,
            generation: 0,
            progress,
        };
        loop {
            if let Message::Hello { .. } = feed.next().await? {
                return Ok(feed);
            }
        }
    }

    pub(crate) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    pub(crate) fn position(&self) -> Option<i64> {
        self.position
    }

    /// The consumer now has everything up to `seq`.
    pub(crate) fn advance(&mut self, seq: i64) {
        if self.position.is_none_or(|p| seq > p) {
            self.position = Some(seq);
            self.progress.position.store(seq, Ordering::Release);
        }
    }

    /// The next message, reconnecting as often as needed; `Err` only for what retrying
    /// cannot fix. Hello and heartbeat messages are handled here and also returned.
    pub(crate) async fn next(&mut self) -> Result<Message> {
        loop {
            let exchange = match &mut self.exchange {
                Some(exchange) => exchange,
                None => match Exchange::open(&self.client, self.request(), self.stall()).await {
                    Ok(exchange) => {
                        self.generation += 1;
                        self.exchange.insert(exchange)
                    }
                    Err(broken) => {
                        self.recover(broken).await?;
                        continue;
                    }
                },
            };
            match exchange.next().await {
                Ok(Message::Hello { log_start, head }) => {
                    if self.position.is_none() {
                        // "earliest" / "latest" resolve against what hello reports, exactly as
                        // the server resolves them, so no commit falls in between.
                        self.advance(match self.named {
                            Cursor::Earliest => log_start - 1,
                            Cursor::Latest => head,
                            Cursor::Seq(seq) => seq,
                        });
                    }
                    self.progress.log_start.store(log_start, Ordering::Release);
                    self.backoff = FIRST_BACKOFF;
                    self.relogged = false;
                    return Ok(Message::Hello { log_start, head });
                }
                Ok(Message::Heartbeat { head }) => {
                    // Every matching commit up to head has been sent (and, as the streams
                    // read only when they have handed out all they got, consumed).
                    self.advance(head);
                    self.progress.heartbeat_head.store(head, Ordering::Release);
                    return Ok(Message::Heartbeat { head });
                }
                Ok(message) => return Ok(message),
                Err(broken) => {
                    self.exchange = None;
                    self.recover(broken).await?;
                }
            }
        }
    }

    /// After a failed or broken call: decide, then wait out the backoff (or log in again).
    async fn recover(&mut self, broken: Broken) -> Result<()> {
        match broken {
            Broken::Status(status) => match classify(status, self.client.can_relogin() && !self.relogged) {
                Disposition::Retry => {}
                Disposition::Relogin => {
                    self.relogged = true;
                    match self.client.login().await {
                        Ok(()) => return Ok(()),
                        // The server went away during the login: back off and try again.
                        Err(Error::Status(status)) => match classify(status, false) {
                            Disposition::Fail(error) => return Err(error),
                            Disposition::Retry | Disposition::Relogin => self.relogged = false,
                        },
                        Err(error) => return Err(error),
                    }
                }
                Disposition::Fail(error) => return Err(error),
            },
            Broken::Ended | Broken::Stalled => {}
            Broken::Bad(error) => return Err(error),
        }
        self.progress.reconnects.fetch_add(1, Ordering::AcqRel);
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(self.client.max_backoff().max(FIRST_BACKOFF));
        Ok(())
    }

    /// Reconnect if nothing (not even a heartbeat) came for this long: five heartbeat
    /// intervals plus two seconds unless the subscription says otherwise.
    fn stall(&self) -> Duration {
        self.spec
            .stall_timeout
            .unwrap_or(self.spec.heartbeat * 5 + Duration::from_secs(2))
    }

    fn request(&self) -> String {
        let after = match (self.position, self.named) {
            (Some(seq), _) | (None, Cursor::Seq(seq)) => serde_json::Value::from(seq),
            (None, Cursor::Earliest) => "earliest".into(),
            (None, Cursor::Latest) => "latest".into(),
        };
        let mut body = serde_json::json!({
            "feed": self.spec.feed,
            "after": after,
            "heartbeat_ms": u64::try_from(self.spec.heartbeat.as_millis()).unwrap_or(u64::MAX),
        });
        if !self.spec.tables.is_empty() {
            body["tables"] = self.spec.tables.clone().into();
        }
        body.to_string()
    }
}
