//! A client for the commit feed and the change scans of an icefloe server (an Arrow Flight
//! SQL server for an Iceberg lakehouse): every commit, pushed the moment it is durable, over
//! Flight `DoExchange`, and the rows of any past seq range, over parallel `DoGet`s.
//!
//! - [`Client::subscribe`] follows `commits.v1`: one typed [`CommitEvent`] per commit, in
//!   seq order. The stream reconnects with backoff when the server restarts or the
//!   connection drops, and resumes after the last event it yielded, so every event arrives
//!   **exactly once** — across server restarts too. An expired cursor is
//!   [`Error::CursorExpired`], never a silent skip.
//! - [`Client::rows`] follows `rows.v1`: the rows each append added to one table, as Arrow
//!   [`RecordBatch`](arrow_array::RecordBatch)es with `_seq`, `_snapshot_id` and
//!   `_operation`, plus a [`RowsItem::Commit`] marker per commit. A schema change ends it
//!   with [`Error::SchemaChanged`].
//! - [`Client::changes`] reads a change scan: the rows appended to one table by the commits
//!   with seq in `(after, until]` ([`Include::All`]: overwrites and deletes too, as rows), as a
//!   [`ChangeStream`] of record batches read from the scan's endpoints by parallel `DoGet`s,
//!   with the range's [`NonAppend`] commits. Batches of different endpoints arrive in no
//!   particular order. A range the server no longer keeps is [`Error::CursorExpired`].
//! - [`ClientOptions`] set TLS (root certificates, mutual TLS) and login: user name and
//!   password (Basic on `Handshake`, exchanged for a bearer token; a renewed token the
//!   server sends is picked up, an expired one leads to a new login) or a bearer token.
//!
//! # Example
//!
//! ```no_run
//! use futures::StreamExt;
//! use icefloe_feed::{Client, ClientOptions, Cursor, Subscription};
//!
//! # async fn run() -> icefloe_feed::Result<()> {
//! let client = Client::connect("grpc://127.0.0.1:31337", ClientOptions::default()).await?;
//! let mut events = client
//!     .subscribe(Subscription {
//!         after: Cursor::Earliest,
//!         tables: vec!["sales.*".into()],
//!         ..Subscription::default()
//!     })
//!     .await?;
//! while let Some(event) = events.next().await {
//!     let event = event?;
//!     println!("{} {} {} +{:?} rows", event.seq, event.operation, event.qualified_name(), event.added_rows);
//!     // Store events.position() with your own results to resume with Cursor::Seq later.
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A change scan, split into at most eight endpoints read four at a time:
//!
//! ```no_run
//! use futures::StreamExt;
//! use icefloe_feed::{ChangeScan, Client, ClientOptions};
//!
//! # async fn run() -> icefloe_feed::Result<()> {
//! let client = Client::connect("grpc://127.0.0.1:31337", ClientOptions::default()).await?;
//! let scan = ChangeScan { max_partitions: Some(8), parallelism: Some(4), ..ChangeScan::new("sales.orders", 100, 250) };
//! let mut changes = client.changes(scan).await?;
//! println!("{} endpoints, non-appends {:?}", changes.endpoints(), changes.non_appends());
//! while let Some(batch) = changes.next().await {
//!     println!("{} rows", batch?.num_rows());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! With authentication and TLS:
//!
//! ```no_run
//! # async fn run() -> icefloe_feed::Result<()> {
//! use icefloe_feed::{Client, ClientOptions};
//!
//! let ca = std::fs::read("ca.pem").expect("CA certificate");
//! let options = ClientOptions::default().with_basic("alice", "secret").with_root_certs_pem(ca);
//! let client = Client::connect("grpc+tls://lake.example:31337", options).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The wire protocol is described in the server's README (*Following commits*, *Change
//! scans*). The `icefloe-tail` binary of this crate prints the feed as JSON lines.
#![deny(missing_docs)]
#![warn(rust_2018_idioms)]

mod changes;
mod client;
mod error;
mod event;
mod feed;
mod rows;
mod subscription;
mod wire;

pub use changes::{ChangeScan, ChangeStream, DEFAULT_PARALLELISM, Include, NonAppend};
pub use client::{Client, ClientOptions, Credentials, TlsOptions};
pub use error::{Error, Result};
pub use event::{CommitEvent, Operation};
pub use rows::{CommitMarker, RowStream, RowsItem};
pub use subscription::{CommitStream, Cursor, Subscription};
