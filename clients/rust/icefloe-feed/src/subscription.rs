//! `commits.v1`: [`Subscription`], [`Cursor`] and the event stream [`CommitStream`].

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::event::CommitEvent;
use crate::feed::{Feed, Progress, Spec};
use crate::wire::Message;

/// Where a feed starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cursor {
    /// The whole retained commit log.
    Earliest,
    /// Only commits after the server's head when the stream starts.
    Latest,
    /// Every commit with a seq greater than this (the last seq you processed).
    Seq(i64),
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cursor::Earliest => f.write_str("earliest"),
            Cursor::Latest => f.write_str("latest"),
            Cursor::Seq(seq) => write!(f, "{seq}"),
        }
    }
}

impl FromStr for Cursor {
    type Err = Error;

    /// `earliest`, `latest` or a seq `>= 0` (what `--after` takes).
    fn from_str(text: &str) -> Result<Cursor> {
        match text {
            "earliest" => Ok(Cursor::Earliest),
            "latest" => Ok(Cursor::Latest),
            _ => match text.parse::<i64>() {
                Ok(seq) if seq >= 0 => Ok(Cursor::Seq(seq)),
                _ => Err(Error::Config(format!(
                    "cursor must be earliest, latest or a seq >= 0, not {text:?}"
                ))),
            },
        }
    }
}

/// What [`Client::subscribe`] follows.
///
/// ```
/// use std::time::Duration;
/// use icefloe_feed::{Cursor, Subscription};
///
/// let sub = Subscription {
///     after: Cursor::Seq(41),
///     tables: vec!["sales.*".into()],
///     ..Subscription::default()
/// };
/// assert_eq!(sub.heartbeat, Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Where to start (default [`Cursor::Latest`]).
    pub after: Cursor,
    /// `ns.t` names or globs such as `ns.*` (`*` stays within one namespace level);
    /// empty for every table. A rename matches by its old and its new name.
    pub tables: Vec<String>,
    /// How often an idle server sends a heartbeat (50 ms to 300 s; default 1 s).
    pub heartbeat: Duration,
    /// Reconnect when nothing, not even a heartbeat, arrived for this long; `None` for
    /// five heartbeat intervals plus two seconds.
    pub stall_timeout: Option<Duration>,
}

impl Default for Subscription {
    fn default() -> Self {
        Subscription {
            after: Cursor::Latest,
            tables: Vec::new(),
            heartbeat: Duration::from_secs(1),
            stall_timeout: None,
        }
    }
}

impl Subscription {
    /// Every table, starting after `after`.
    pub fn after(after: Cursor) -> Self {
        Subscription {
            after,
            ..Subscription::default()
        }
    }
}

/// The commit feed as a [`Stream`] of [`CommitEvent`]s, in seq order, each exactly once.
///
/// The stream follows the feed forever: when the call breaks (the server restarts, the
/// connection drops, nothing arrives within the stall timeout) it reconnects with backoff
/// and resumes after the last event it yielded (or the last heartbeat head), so no event
/// is lost or repeated, also across a server restart.
///
/// It yields an `Err` — and then ends — only for what retrying cannot fix:
/// [`Error::CursorExpired`] when the log no longer reaches back to the cursor (for example
/// after a long outage), or [`Error::Status`] when the server refuses the subscription.
///
/// A consumer that stops polling simply stops reading: the server moves the stream off its
/// live path and later catches it up from the durable log, with no gap.
pub struct CommitStream {
    inner: BoxStream<'static, Result<CommitEvent>>,
    progress: Arc<Progress>,
}

impl fmt::Debug for CommitStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitStream")
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl CommitStream {
    pub(crate) async fn start(client: Client, subscription: Subscription) -> Result<CommitStream> {
        let spec = Spec {
            feed: "commits.v1",
            tables: subscription.tables,
            heartbeat: subscription.heartbeat,
            stall_timeout: subscription.stall_timeout,
        };
        let feed = Feed::start(client, spec, subscription.after).await?;
        let progress = feed.progress();
        let state = Events {
            feed,
            pending: VecDeque::new(),
            done: false,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        })
        .boxed();
        Ok(CommitStream { inner, progress })
    }

    /// The resume cursor: the seq of the last event yielded, or a later heartbeat head
    /// (every matching commit up to it has been yielded). Persist it to resume a later
    /// process with [`Cursor::Seq`].
    pub fn position(&self) -> Option<i64> {
        self.progress.position()
    }

    /// The head of the last heartbeat: the server had sent every matching commit up to it.
    /// `None` until the first heartbeat.
    pub fn heartbeat_head(&self) -> Option<i64> {
        self.progress.heartbeat_head()
    }

    /// The oldest seq the server's log held at the last (re)connection.
    pub fn log_start(&self) -> Option<i64> {
        self.progress.log_start()
    }

    /// How often the stream has reconnected so far.
    pub fn reconnects(&self) -> u64 {
        self.progress.reconnects()
    }
}

impl Stream for CommitStream {
    type Item = Result<CommitEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

/// The state behind a [`CommitStream`].
struct Events {
    feed: Feed,
    /// Events received and not yet yielded. The network is read only when this is empty,
    /// which is what makes a heartbeat's head safe to take as the cursor.
    pending: VecDeque<CommitEvent>,
    done: bool,
}

impl Events {
    async fn next(&mut self) -> Option<Result<CommitEvent>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                if self.feed.position().is_some_and(|p| event.seq <= p) {
                    continue; // sent again by the call after a reconnect: already yielded
                }
                self.feed.advance(event.seq);
                return Some(Ok(event));
            }
            match self.feed.next().await {
                Ok(Message::Batch { batch, .. }) => match CommitEvent::from_batch(&batch) {
                    Ok(events) => self.pending.extend(events),
                    Err(e) => return self.fail(e),
                },
                Ok(_) => {}
                Err(e) => return self.fail(e),
            }
        }
    }

    fn fail(&mut self, error: Error) -> Option<Result<CommitEvent>> {
        self.done = true;
        Some(Err(error))
    }
}
