//! Change scans: the rows appended to one table by the commits with seq in `(after, until]`,
//! read once (not followed) from the endpoints of a `GetFlightInfo`, several at a time.
//!
//! The request is the server's JSON command `{"changes": "ns.t", "after": S1, "until": S2,
//! "include": "appends" | "all"}`; the FlightInfo's endpoints are disjoint parts of the
//! answer, each a signed ticket read with `DoGet`, and its `app_metadata` lists the
//! commits of the range that are not appends.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_schema::{Schema, SchemaRef};
use futures::stream::{BoxStream, Stream, StreamExt, TryStreamExt};
use serde::Deserialize;
use tonic::metadata::{AsciiMetadataValue, MetadataKey};

use crate::client::Client;
use crate::error::{Error, Result, status_error};
use crate::event::Operation;

/// Endpoints read at once when [`ChangeScan::parallelism`] is `None`.
pub const DEFAULT_PARALLELISM: usize = 4;

/// The call header that sets the bytes of data files per endpoint (the server's
/// `icefloe.scan.target-partition-bytes`).
const TARGET_PARTITION_BYTES: &str = "icefloe.scan.target-partition-bytes";
/// The call header that caps the number of endpoints (`icefloe.scan.max-partitions`).
const MAX_PARTITIONS: &str = "icefloe.scan.max-partitions";
/// A location that means "the server that answered the FlightInfo" (Arrow Flight's
/// convention, as an empty location list is).
const REUSE_CONNECTION: &str = "arrow-flight-reuse-connection://";

/// Which commits of the range are answered as rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Include {
    /// The rows of appends only (`_operation` `append`); every other commit is listed in
    /// [`ChangeStream::non_appends`].
    #[default]
    Appends,
    /// Also copy-on-write overwrites and deletes, as the rows they removed (`_operation`
    /// `delete`) and added (`insert`), unchanged rows cancelled out (Iceberg's changelog
    /// view). Commits without a row form (merge-on-read deletes, a whole-table replace)
    /// stay listed in [`ChangeStream::non_appends`].
    All,
}

impl Include {
    fn as_str(self) -> &'static str {
        match self {
            Include::Appends => "appends",
            Include::All => "all",
        }
    }
}

/// What [`Client::changes`] reads: the changes of one table by the commits with seq in
/// `(after, until]`.
///
/// The answer is the same for the same range whenever it is read (compaction included),
/// as long as the server still keeps the range's commits and files; otherwise the scan
/// fails with [`Error::CursorExpired`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeScan {
    /// `namespace.table` (no glob).
    pub table: String,
    /// The range starts after this commit seq (exclusive).
    pub after: i64,
    /// The range ends with this commit seq (inclusive); at most the server's commit head.
    pub until: i64,
    /// Appends only, or overwrites and deletes as rows too.
    pub include: Include,
    /// The most endpoints the server may split the scan into (header
    /// `icefloe.scan.max-partitions`); `None` keeps the server's setting.
    pub max_partitions: Option<u32>,
    /// Bytes of data files per endpoint the server aims for (header
    /// `icefloe.scan.target-partition-bytes`); `None` keeps the server's setting.
    pub target_partition_bytes: Option<u64>,
    /// How many endpoints are read at once (parallel `DoGet` calls); `None` is
    /// [`DEFAULT_PARALLELISM`]. `Some(1)` reads them one after another, in the server's order.
    pub parallelism: Option<usize>,
}

impl ChangeScan {
    /// The appends to `table` by the commits with seq in `(after, until]`, split as the
    /// server likes.
    pub fn new(table: impl Into<String>, after: i64, until: i64) -> ChangeScan {
        ChangeScan {
            table: table.into(),
            after,
            until,
            ..ChangeScan::default()
        }
    }

    fn command(&self) -> String {
        serde_json::json!({
            "changes": self.table,
            "after": self.after,
            "until": self.until,
            "include": self.include.as_str(),
        })
        .to_string()
    }
}

/// A commit of the range that is not answered as rows, from the FlightInfo's
/// `app_metadata`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonAppend {
    /// The commit's seq.
    pub seq: i64,
    /// What the commit did (`delete`, `overwrite`, `schema`, `replace`, ...).
    pub operation: Operation,
    /// Whether the commit may have changed rows. `false` for commits that leave every row
    /// as it was (compaction, snapshot expiry, schema and property changes): a consumer
    /// of appends can skip those; one with `true` means "the appends do not tell the
    /// whole story, re-read the table".
    pub data_change: bool,
}

#[derive(Deserialize)]
struct Metadata {
    non_appends: Vec<RawNonAppend>,
}

#[derive(Deserialize)]
struct RawNonAppend {
    seq: i64,
    operation: String,
    data_change: bool,
}

/// The answer of [`Client::changes`]: the scan's schema, its non-append commits, and its
/// rows as a [`Stream`] of [`RecordBatch`]es.
///
/// Every batch has [`ChangeStream::schema`]: the table's columns plus `_seq int64`,
/// `_snapshot_id int64` and `_operation utf8` (`append`, or with [`Include::All`] also
/// `delete` / `insert`).
///
/// **Order**: the endpoints are read in parallel and their batches are yielded as they
/// arrive, so batches of different endpoints interleave in no particular order (the
/// server splits a scan by data files, not by seq). Within one endpoint the order is the
/// server's. Sort by `_seq` when order matters, or set [`ChangeScan::parallelism`] to 1.
///
/// The stream ends after the last batch of the last endpoint, or after the first error
/// (the other endpoints' calls are then cancelled). Dropping it cancels every call.
pub struct ChangeStream {
    schema: SchemaRef,
    non_appends: Vec<NonAppend>,
    endpoints: usize,
    total_records: Option<i64>,
    inner: BoxStream<'static, Result<RecordBatch>>,
    done: bool,
}

impl fmt::Debug for ChangeStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChangeStream")
            .field("endpoints", &self.endpoints)
            .field("non_appends", &self.non_appends)
            .field("total_records", &self.total_records)
            .finish_non_exhaustive()
    }
}

impl ChangeStream {
    pub(crate) async fn start(client: Client, scan: ChangeScan) -> Result<ChangeStream> {
        let info = flight_info(&client, &scan).await?;
        let metadata: Metadata = serde_json::from_slice(&info.app_metadata)
            .map_err(|e| Error::protocol(format!("change scan app_metadata is not the expected JSON: {e}")))?;
        let non_appends = metadata
            .non_appends
            .into_iter()
            .map(|raw| NonAppend {
                seq: raw.seq,
                operation: Operation::parse(&raw.operation),
                data_change: raw.data_change,
            })
            .collect();
        let total_records = (info.total_records >= 0).then_some(info.total_records);
        let endpoints = info.endpoint.clone();
        let schema = SchemaRef::new(Schema::try_from(info)?);
        let count = endpoints.len();
        let parallelism = scan.parallelism.unwrap_or(DEFAULT_PARALLELISM).max(1);
        let connections = Arc::new(Connections::new(client));
        let expected = Arc::clone(&schema);
        let inner = futures::stream::iter(endpoints)
            .map(move |endpoint| read_endpoint(Arc::clone(&connections), endpoint, Arc::clone(&expected)))
            .flatten_unordered(parallelism)
            .boxed();
        Ok(ChangeStream {
            schema,
            non_appends,
            endpoints: count,
            total_records,
            inner,
            done: false,
        })
    }

    /// The schema of every batch: the table's columns plus `_seq`, `_snapshot_id`,
    /// `_operation`.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    /// The commits of the range, in seq order, that the rows do not express (see
    /// [`NonAppend`]): with [`Include::Appends`] every non-append commit of the table.
    pub fn non_appends(&self) -> &[NonAppend] {
        &self.non_appends
    }

    /// How many endpoints (parts) the server split the scan into.
    pub fn endpoints(&self) -> usize {
        self.endpoints
    }

    /// The number of rows the scan yields, when the server knows it up front (it does for
    /// [`Include::Appends`]).
    pub fn total_records(&self) -> Option<i64> {
        self.total_records
    }

    /// Read every batch into memory (convenient for small ranges).
    ///
    /// # Errors
    ///
    /// The first error of any endpoint (see [`Client::changes`]).
    pub async fn collect_batches(mut self) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        while let Some(batch) = self.next().await {
            out.push(batch?);
        }
        Ok(out)
    }
}

impl Stream for ChangeStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(Some(Err(_)) | None) = &item {
            self.done = true;
            // Drop (cancel) the calls of the other endpoints now, not when the stream goes.
            self.inner = futures::stream::empty().boxed();
        }
        item
    }
}

/// `GetFlightInfo` for the scan, with its partitioning headers; logs in again once if the
/// bearer token expired and the client can.
async fn flight_info(client: &Client, scan: &ChangeScan) -> Result<FlightInfo> {
    let mut headers = Vec::new();
    if let Some(bytes) = scan.target_partition_bytes {
        headers.push((TARGET_PARTITION_BYTES, bytes.to_string()));
    }
    if let Some(most) = scan.max_partitions {
        headers.push((MAX_PARTITIONS, most.to_string()));
    }
    let descriptor = FlightDescriptor::new_cmd(scan.command());
    let mut relogged = false;
    loop {
        let mut request = tonic::Request::new(descriptor.clone());
        for (key, value) in &headers {
            let value = AsciiMetadataValue::try_from(value.as_str())
                .map_err(|_| Error::Config(format!("{key} is not valid header text")))?;
            request.metadata_mut().insert(MetadataKey::from_static(key), value);
        }
        match client.service().get_flight_info(request).await {
            Ok(response) => {
                client.note_headers(response.metadata());
                return Ok(response.into_inner());
            }
            Err(status) if status.code() == tonic::Code::Unauthenticated && client.can_relogin() && !relogged => {
                relogged = true;
                client.login().await?;
            }
            Err(status) => return Err(status_error(status)),
        }
    }
}

/// The clients of one scan: the one that asked, and one per other location named by an
/// endpoint (connected on first use, shared by the endpoints that name it).
struct Connections {
    home: Client,
    others: tokio::sync::Mutex<Others>,
}

#[derive(Default)]
struct Others {
    clients: HashMap<String, Client>,
    /// Locations that refused a connection in this scan: tried last by the next endpoints,
    /// so a dead server among several locations costs one connection attempt, not one
    /// per endpoint.
    failed: HashSet<String>,
}

impl Connections {
    fn new(home: Client) -> Connections {
        Connections {
            home,
            others: tokio::sync::Mutex::default(),
        }
    }

    /// The client for an endpoint: this server when it names no location, otherwise the
    /// first of its locations that accepts a connection.
    async fn for_endpoint(&self, endpoint: &FlightEndpoint) -> Result<Client> {
        let mut uris: Vec<&str> = endpoint.location.iter().map(|l| l.uri.as_str()).collect();
        if uris.is_empty() || uris.iter().any(|uri| uri.starts_with(REUSE_CONNECTION)) {
            return Ok(self.home.clone());
        }
        // One connection attempt at a time: endpoints naming the same location wait for
        // the first one's connection instead of opening their own.
        let mut others = self.others.lock().await;
        if let Some(client) = uris.iter().find_map(|uri| others.clients.get(*uri)) {
            return Ok(client.clone());
        }
        uris.sort_by_key(|uri| others.failed.contains(*uri)); // stable: the server's order otherwise
        let mut last = None;
        for uri in uris {
            match self.home.connect_like(uri).await {
                Ok(client) => {
                    others.failed.remove(uri);
                    others.clients.insert(uri.to_string(), client.clone());
                    return Ok(client);
                }
                Err(e) => {
                    others.failed.insert(uri.to_string());
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::protocol("endpoint without a usable location")))
    }
}

/// The batches of one endpoint: one `DoGet` on its ticket.
fn read_endpoint(
    connections: Arc<Connections>,
    endpoint: FlightEndpoint,
    expected: SchemaRef,
) -> BoxStream<'static, Result<RecordBatch>> {
    let open = async move {
        let client = connections.for_endpoint(&endpoint).await?;
        let ticket = endpoint
            .ticket
            .ok_or_else(|| Error::protocol("change scan endpoint without a ticket"))?;
        // Tickets are stateless, so a DoGet refused for a token that expired after planning
        // (a long pause between planning and reading, or a slow scan) is simply sent again
        // after one new login, when the client has a password to log in with.
        let mut relogged = false;
        let response = loop {
            match client.service().do_get(Ticket::new(ticket.ticket.clone())).await {
                Ok(response) => break response,
                Err(status) if status.code() == tonic::Code::Unauthenticated && client.can_relogin() && !relogged => {
                    relogged = true;
                    client.login().await?;
                }
                Err(status) => return Err(status_error(status)),
            }
        };
        client.note_headers(response.metadata());
        let data = response
            .into_inner()
            .map_err(|status| FlightError::Tonic(Box::new(status)));
        let batches = FlightRecordBatchStream::new_from_flight_data(data).map(move |item| {
            let batch = item.map_err(flight_error)?;
            if batch.schema().fields() != expected.fields() {
                return Err(Error::protocol(format!(
                    "a change scan endpoint sent batches of schema {:?}, not the FlightInfo's {:?}",
                    batch.schema(),
                    expected
                )));
            }
            Ok(batch)
        });
        Ok::<_, Error>(batches)
    };
    futures::stream::once(open).try_flatten().boxed()
}

fn flight_error(error: FlightError) -> Error {
    match error {
        FlightError::Tonic(status) => status_error(*status),
        FlightError::Arrow(e) => Error::Arrow(e),
        other => Error::protocol(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_is_the_servers_json() {
        let mut scan = ChangeScan::new("ns.t", 3, 9);
        let body: serde_json::Value = serde_json::from_str(&scan.command()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"changes": "ns.t", "after": 3, "until": 9, "include": "appends"})
        );
        scan.include = Include::All;
        let body: serde_json::Value = serde_json::from_str(&scan.command()).unwrap();
        assert_eq!(body["include"], "all");
    }
}
