//! The feed's messages on the wire: one DoExchange call and the decoding of what it sends.
//!
//! A feed interleaves Arrow IPC messages (schema, record batches) with *metadata-only*
//! messages (`hello`, `heartbeat`, `commit`) whose `FlightData` has no IPC header at all.
//! arrow-flight's `FlightDataDecoder` expects an IPC header on every message, so the feed
//! decodes its `FlightData` here: metadata-only messages as JSON, the rest with arrow-ipc.

use std::collections::HashMap;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_flight::{FlightData, FlightDescriptor};
use arrow_ipc::MessageHeader;
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use serde::Deserialize;
use tonic::Streaming;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::event::{CommitEvent, Operation};

/// One message of a feed, decoded.
#[derive(Debug)]
pub(crate) enum Message {
    /// The first message: the retained log's first seq and the head when the stream began.
    Hello { log_start: i64, head: i64 },
    /// Idle: every matching commit up to `head` has been sent.
    Heartbeat { head: i64 },
    /// rows.v1: commit `seq` is complete (metadata-only for non-append commits).
    Commit(CommitMarker),
    /// A record batch, with the commit marker it carries (rows.v1, last batch of an append).
    Batch {
        batch: RecordBatch,
        commit: Option<CommitMarker>,
    },
}

/// A rows.v1 `{"commit": {...}}` marker: the commit, as the event schema's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMarker {
    /// The commit (the same fields as a `commits.v1` event).
    pub event: CommitEvent,
    /// For a rename, the table's previous `namespace.table`.
    pub renamed_from: Option<String>,
}

/// How a call ended without a message.
pub(crate) enum Broken {
    /// The server (or the connection) ended the call with this status.
    Status(tonic::Status),
    /// The server ended the stream cleanly, which a feed never does on its own.
    Ended,
    /// Nothing arrived within the stall timeout (not even a heartbeat).
    Stalled,
    /// A message could not be decoded: not retryable.
    Bad(Error),
}

/// One open DoExchange feed call.
pub(crate) struct Exchange {
    stream: Streaming<FlightData>,
    schema: Option<SchemaRef>,
    stall: Duration,
}

impl Exchange {
    /// Open the feed described by `request` (the subscription JSON).
    pub(crate) async fn open(client: &Client, request: String, stall: Duration) -> Result<Exchange, Broken> {
        let descriptor = FlightDescriptor::new_cmd(request);
        let first = FlightData {
            flight_descriptor: Some(descriptor),
            ..Default::default()
        };
        // The request stream ends after the descriptor: the feed reads nothing from the
        // client, and ending it half-closes the call as the other clients do.
        let mut service = client.service();
        let call = service.do_exchange(futures::stream::iter([first]));
        // The server answers with its headers and hello at once; a server that accepted
        // the connection but never answers is treated like a stalled stream.
        let response = match tokio::time::timeout(stall, call).await {
            Err(_) => return Err(Broken::Stalled),
            Ok(Err(status)) => return Err(Broken::Status(status)),
            Ok(Ok(response)) => response,
        };
        client.note_headers(response.metadata());
        Ok(Exchange {
            stream: response.into_inner(),
            schema: None,
            stall,
        })
    }

    /// The next message; `Err` when the call is over (see [`Broken`]).
    pub(crate) async fn next(&mut self) -> Result<Message, Broken> {
        loop {
            let data = match tokio::time::timeout(self.stall, self.stream.message()).await {
                Err(_) => return Err(Broken::Stalled),
                Ok(Err(status)) => return Err(Broken::Status(status)),
                Ok(Ok(None)) => return Err(Broken::Ended),
                Ok(Ok(Some(data))) => data,
            };
            if let Some(message) = self.decode(data).map_err(Broken::Bad)? {
                return Ok(message);
            }
        }
    }

    fn decode(&mut self, data: FlightData) -> Result<Option<Message>> {
        if data.data_header.is_empty() {
            return metadata_message(&data.app_metadata);
        }
        let message = arrow_ipc::root_as_message(&data.data_header)
            .map_err(|e| Error::protocol(format!("undecodable IPC message header: {e}")))?;
        match message.header_type() {
            MessageHeader::Schema => {
                self.schema = Some(SchemaRef::new(Schema::try_from(&data)?));
                Ok(None)
            }
            MessageHeader::RecordBatch => {
                let schema = self
                    .schema
                    .clone()
                    .ok_or_else(|| Error::protocol("record batch before its schema"))?;
                let batch = arrow_flight::utils::flight_data_to_arrow_batch(&data, schema, &HashMap::new())?;
                let commit = match metadata_message(&data.app_metadata)? {
                    Some(Message::Commit(marker)) => Some(marker),
                    _ => None,
                };
                Ok(Some(Message::Batch { batch, commit }))
            }
            // The feed's schemas have no dictionary-encoded columns.
            other => Err(Error::protocol(format!(
                "unexpected IPC message {:?} in a feed",
                other.variant_name()
            ))),
        }
    }
}

#[derive(Deserialize)]
struct Head {
    head: i64,
}

#[derive(Deserialize)]
struct Hello {
    log_start: i64,
    head: i64,
}

/// `record_summary` of the server: the event's fields, `committed_at` as microseconds.
#[derive(Deserialize)]
struct Summary {
    seq: i64,
    committed_at_us: i64,
    namespace: String,
    table: String,
    table_uuid: Option<String>,
    operation: String,
    snapshot_id: Option<i64>,
    parent_snapshot_id: Option<i64>,
    added_rows: Option<i64>,
    deleted_rows: Option<i64>,
    added_files: Option<i64>,
    metadata_location: Option<String>,
    principal: Option<String>,
    renamed_from: Option<String>,
}

impl Summary {
    fn into_marker(self) -> Result<CommitMarker> {
        let committed_at = chrono::DateTime::from_timestamp_micros(self.committed_at_us)
            .ok_or_else(|| Error::protocol("commit marker time out of range"))?;
        Ok(CommitMarker {
            event: CommitEvent {
                seq: self.seq,
                committed_at,
                namespace: self.namespace,
                table: self.table,
                table_uuid: self.table_uuid,
                operation: Operation::parse(&self.operation),
                snapshot_id: self.snapshot_id,
                parent_snapshot_id: self.parent_snapshot_id,
                added_rows: self.added_rows,
                deleted_rows: self.deleted_rows,
                added_files: self.added_files,
                metadata_location: self.metadata_location,
                principal: self.principal,
            },
            renamed_from: self.renamed_from,
        })
    }
}

/// Decode `{"hello": ...}`, `{"heartbeat": ...}` or `{"commit": ...}`; `None` for empty
/// metadata or a kind this client does not know (newer servers may add some).
fn metadata_message(raw: &Bytes) -> Result<Option<Message>> {
    if raw.is_empty() {
        return Ok(None);
    }
    let body: HashMap<String, serde_json::Value> =
        serde_json::from_slice(raw).map_err(|e| Error::protocol(format!("feed metadata is not a JSON object: {e}")))?;
    let bad = |kind: &str, e: serde_json::Error| Error::protocol(format!("malformed {kind} message: {e}"));
    for (kind, value) in body {
        let message = match kind.as_str() {
            "hello" => {
                let hello: Hello = serde_json::from_value(value).map_err(|e| bad("hello", e))?;
                Message::Hello {
                    log_start: hello.log_start,
                    head: hello.head,
                }
            }
            "heartbeat" => {
                let head: Head = serde_json::from_value(value).map_err(|e| bad("heartbeat", e))?;
                Message::Heartbeat { head: head.head }
            }
            "commit" => {
                let summary: Summary = serde_json::from_value(value).map_err(|e| bad("commit", e))?;
                Message::Commit(summary.into_marker()?)
            }
            _ => continue,
        };
        return Ok(Some(message));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_messages_decode() {
        let hello = metadata_message(&Bytes::from_static(br#"{"hello":{"log_start":1,"head":5}}"#)).unwrap();
        assert!(matches!(hello, Some(Message::Hello { log_start: 1, head: 5 })));
        let beat = metadata_message(&Bytes::from_static(br#"{"heartbeat":{"head":9}}"#)).unwrap();
        assert!(matches!(beat, Some(Message::Heartbeat { head: 9 })));
        let unknown = metadata_message(&Bytes::from_static(br#"{"future":{}}"#)).unwrap();
        assert!(unknown.is_none());
        assert!(metadata_message(&Bytes::from_static(b"not json")).is_err());
    }
}
