//! `rows.v1`: the rows appended to one table, as Arrow record batches.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use futures::stream::{BoxStream, Stream, StreamExt};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::feed::{Feed, Progress, Spec};
use crate::subscription::Cursor;
pub use crate::wire::CommitMarker;
use crate::wire::Message;

/// One item of a [`RowStream`].
#[derive(Debug, Clone)]
pub enum RowsItem {
    /// Rows of an append: the table's columns plus `_seq int64`, `_snapshot_id int64` and
    /// `_operation utf8`. Every row of a batch belongs to the same commit.
    Batch(RecordBatch),
    /// Commit `event.seq` is complete. After an append it follows the append's last
    /// batch; for any other commit (overwrite, delete, schema, rename, drop, ...) it comes
    /// alone and means "re-read the table".
    Commit(Box<CommitMarker>),
}

/// The row feed of one table as a [`Stream`] of [`RowsItem`]s.
///
/// Like [`CommitStream`](crate::CommitStream) it reconnects by itself and resumes after
/// the last complete commit. If a call breaks in the middle of an append, the server sends
/// that append again from its start and the rows already yielded are skipped (the server
/// reads a commit's files in the same order every time), so each row is yielded once.
///
/// When the table's schema changes after rows were sent, the stream yields the schema
/// commit's marker and then [`Error::SchemaChanged`]: start a new stream with
/// `after = resume_after` to read on with the new schema.
pub struct RowStream {
    inner: BoxStream<'static, Result<RowsItem>>,
    progress: Arc<Progress>,
}

impl fmt::Debug for RowStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowStream")
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl RowStream {
    pub(crate) async fn start(client: Client, table: String, after: Cursor) -> Result<RowStream> {
        let spec = Spec {
            feed: "rows.v1",
            tables: vec![table],
            heartbeat: Duration::from_secs(1),
            stall_timeout: None,
        };
        let feed = Feed::start(client, spec, after).await?;
        let progress = feed.progress();
        let generation = feed.generation;
        let state = Rows {
            feed,
            pending: VecDeque::new(),
            open: None,
            skip: None,
            generation,
            done: false,
        };
        let inner = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        })
        .boxed();
        Ok(RowStream { inner, progress })
    }

    /// The seq of the last complete commit yielded (or a later heartbeat head): the
    /// cursor to resume from.
    pub fn position(&self) -> Option<i64> {
        self.progress.position()
    }

    /// The head of the last heartbeat; `None` until the first one.
    pub fn heartbeat_head(&self) -> Option<i64> {
        self.progress.heartbeat_head()
    }

    /// How often the stream has reconnected so far.
    pub fn reconnects(&self) -> u64 {
        self.progress.reconnects()
    }
}

impl Stream for RowStream {
    type Item = Result<RowsItem>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
    }
}

struct Rows {
    feed: Feed,
    pending: VecDeque<RowsItem>,
    /// The append being yielded (seq, rows so far) until its marker is yielded.
    open: Option<(i64, usize)>,
    /// After a reconnect in the middle of an append: rows of that seq to drop.
    skip: Option<(i64, usize)>,
    generation: u64,
    done: bool,
}

impl Rows {
    async fn next(&mut self) -> Option<Result<RowsItem>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(item) = self.pending.pop_front() {
                match &item {
                    RowsItem::Batch(batch) => {
                        let seq = batch_seq(batch).unwrap_or_default();
                        let (_, rows) = self.open.get_or_insert((seq, 0));
                        *rows += batch.num_rows();
                    }
                    RowsItem::Commit(marker) => {
                        self.open = None;
                        self.feed.advance(marker.event.seq);
                    }
                }
                return Some(Ok(item));
            }
            let message = match self.feed.next().await {
                Ok(message) => message,
                Err(e) => return self.fail(e),
            };
            if self.feed.generation != self.generation {
                // A new call resends the open append from its first row.
                self.generation = self.feed.generation;
                self.skip = self.open;
            }
            match message {
                Message::Batch { batch, commit } => {
                    let Some(seq) = batch_seq(&batch) else {
                        return self.fail(Error::protocol("rows.v1 batch without a _seq value"));
                    };
                    if self.feed.position().is_some_and(|p| seq <= p) {
                        continue; // a commit yielded before the reconnect
                    }
                    let batch = self.without_yielded_rows(seq, batch);
                    if batch.num_rows() > 0 {
                        self.pending.push_back(RowsItem::Batch(batch));
                    }
                    if let Some(marker) = commit {
                        self.pending.push_back(RowsItem::Commit(Box::new(marker)));
                    }
                }
                Message::Commit(marker) => {
                    if self.feed.position().is_none_or(|p| marker.event.seq > p) {
                        self.pending.push_back(RowsItem::Commit(Box::new(marker)));
                    }
                }
                Message::Hello { .. } | Message::Heartbeat { .. } => {}
            }
        }
    }

    /// Drop the rows of `seq` that were yielded before a reconnect.
    fn without_yielded_rows(&mut self, seq: i64, batch: RecordBatch) -> RecordBatch {
        match &mut self.skip {
            Some((skip_seq, rows)) if *skip_seq == seq && *rows > 0 => {
                let drop = (*rows).min(batch.num_rows());
                *rows -= drop;
                batch.slice(drop, batch.num_rows() - drop)
            }
            _ => batch,
        }
    }

    fn fail(&mut self, error: Error) -> Option<Result<RowsItem>> {
        self.done = true;
        Some(Err(error))
    }
}

fn batch_seq(batch: &RecordBatch) -> Option<i64> {
    let column = batch.column_by_name("_seq")?.as_primitive_opt::<Int64Type>()?;
    (!column.is_empty() && column.is_valid(0)).then(|| column.value(0))
}
