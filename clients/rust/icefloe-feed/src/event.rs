//! [`CommitEvent`]: one row of the `commits.v1` event schema, decoded from Arrow.

use std::fmt;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use crate::error::{Error, Result};

/// What a commit did to its table (the event's `operation` column).
///
/// The server may add operations; those arrive as [`Operation::Other`] with their name, so
/// a consumer built against this version keeps working.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// The table was created (CREATE TABLE, ingest in a create mode).
    Create,
    /// Rows were appended (DoPut, INSERT, ingest).
    Append,
    /// Data files were replaced by others holding changed rows (UPDATE).
    Overwrite,
    /// Rows were removed (DELETE, TRUNCATE).
    Delete,
    /// The table's schema changed (ALTER TABLE ... COLUMN).
    Schema,
    /// The table was dropped.
    Drop,
    /// The table was renamed; the event names the new name.
    Rename,
    /// Maintenance rewrote files without changing rows (compaction).
    Replace,
    /// Maintenance expired old snapshots.
    Expire,
    /// An operation this version of the client has no variant for.
    Other(String),
}

impl Operation {
    /// Parse the `operation` column's text.
    pub fn parse(text: &str) -> Operation {
        match text {
            "create" => Operation::Create,
            "append" => Operation::Append,
            "overwrite" => Operation::Overwrite,
            "delete" => Operation::Delete,
            "schema" => Operation::Schema,
            "drop" => Operation::Drop,
            "rename" => Operation::Rename,
            "replace" => Operation::Replace,
            "expire" => Operation::Expire,
            other => Operation::Other(other.to_string()),
        }
    }

    /// The name as the server spells it (`"append"`, `"schema"`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            Operation::Create => "create",
            Operation::Append => "append",
            Operation::Overwrite => "overwrite",
            Operation::Delete => "delete",
            Operation::Schema => "schema",
            Operation::Drop => "drop",
            Operation::Rename => "rename",
            Operation::Replace => "replace",
            Operation::Expire => "expire",
            Operation::Other(name) => name,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Operation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One commit, with every column of the `commits.v1` event schema.
///
/// Serialises (serde) with the schema's field names; `committed_at` as RFC 3339 with
/// microseconds and `+00:00`, as `icefloe subscribe` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitEvent {
    /// The commit's sequence number: strictly increasing, the feed's resume cursor.
    pub seq: i64,
    /// When the commit was made durable (microsecond precision).
    #[serde(serialize_with = "rfc3339_micros")]
    pub committed_at: DateTime<Utc>,
    /// The table's namespace; levels of a multi-level namespace are joined with `.`.
    pub namespace: String,
    /// The table name (for a rename, the new name).
    pub table: String,
    /// The Iceberg table UUID.
    pub table_uuid: Option<String>,
    /// What the commit did.
    pub operation: Operation,
    /// The snapshot the commit made current, for commits that add one.
    pub snapshot_id: Option<i64>,
    /// The snapshot that was current before.
    pub parent_snapshot_id: Option<i64>,
    /// Rows the commit added.
    pub added_rows: Option<i64>,
    /// Rows the commit removed.
    pub deleted_rows: Option<i64>,
    /// Data files the commit added.
    pub added_files: Option<i64>,
    /// The table metadata file the commit wrote.
    pub metadata_location: Option<String>,
    /// The authenticated user who made the commit (servers with `--users`).
    pub principal: Option<String>,
}

impl CommitEvent {
    /// `namespace.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.namespace, self.table)
    }

    /// Decode every row of an event batch, in order.
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] if the batch does not have the event schema's columns and types.
    pub fn from_batch(batch: &RecordBatch) -> Result<Vec<CommitEvent>> {
        let columns = EventColumns::new(batch)?;
        (0..batch.num_rows()).map(|row| columns.event(row)).collect()
    }
}

fn rfc3339_micros<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Micros, false))
}

/// The event batch's columns, looked up by name once per batch.
struct EventColumns<'a> {
    seq: &'a arrow_array::Int64Array,
    committed_at: &'a arrow_array::TimestampMicrosecondArray,
    namespace: &'a arrow_array::StringArray,
    table: &'a arrow_array::StringArray,
    table_uuid: &'a arrow_array::StringArray,
    operation: &'a arrow_array::StringArray,
    snapshot_id: &'a arrow_array::Int64Array,
    parent_snapshot_id: &'a arrow_array::Int64Array,
    added_rows: &'a arrow_array::Int64Array,
    deleted_rows: &'a arrow_array::Int64Array,
    added_files: &'a arrow_array::Int64Array,
    metadata_location: &'a arrow_array::StringArray,
    principal: &'a arrow_array::StringArray,
}

impl<'a> EventColumns<'a> {
    fn new(batch: &'a RecordBatch) -> Result<Self> {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| Error::protocol(format!("event batch has no column {name:?}")))
        };
        let int64 = |name: &str| {
            column(name)?
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| Error::protocol(format!("event column {name:?} is not int64")))
        };
        let utf8 = |name: &str| {
            column(name)?
                .as_string_opt::<i32>()
                .ok_or_else(|| Error::protocol(format!("event column {name:?} is not utf8")))
        };
        let at = column("committed_at")?;
        if !matches!(
            at.data_type(),
            DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _)
        ) {
            return Err(Error::protocol(format!(
                "event column \"committed_at\" is {}, not timestamp[us]",
                at.data_type()
            )));
        }
        Ok(EventColumns {
            seq: int64("seq")?,
            committed_at: at.as_primitive::<TimestampMicrosecondType>(),
            namespace: utf8("namespace")?,
            table: utf8("table")?,
            table_uuid: utf8("table_uuid")?,
            operation: utf8("operation")?,
            snapshot_id: int64("snapshot_id")?,
            parent_snapshot_id: int64("parent_snapshot_id")?,
            added_rows: int64("added_rows")?,
            deleted_rows: int64("deleted_rows")?,
            added_files: int64("added_files")?,
            metadata_location: utf8("metadata_location")?,
            principal: utf8("principal")?,
        })
    }

    fn event(&self, row: usize) -> Result<CommitEvent> {
        // The contract marks these not null; refuse a batch that breaks it rather than
        // inventing values (a seq of 0 would corrupt the resume cursor).
        for (name, column) in [
            ("seq", self.seq as &dyn Array),
            ("committed_at", self.committed_at),
            ("namespace", self.namespace),
            ("table", self.table),
            ("operation", self.operation),
        ] {
            if column.is_null(row) {
                return Err(Error::protocol(format!("event column {name:?} is null")));
            }
        }
        let micros = self.committed_at.value(row);
        let committed_at = DateTime::from_timestamp_micros(micros)
            .ok_or_else(|| Error::protocol(format!("committed_at {micros} is out of range")))?;
        Ok(CommitEvent {
            seq: self.seq.value(row),
            committed_at,
            namespace: self.namespace.value(row).to_string(),
            table: self.table.value(row).to_string(),
            table_uuid: text(self.table_uuid, row),
            operation: Operation::parse(self.operation.value(row)),
            snapshot_id: number(self.snapshot_id, row),
            parent_snapshot_id: number(self.parent_snapshot_id, row),
            added_rows: number(self.added_rows, row),
            deleted_rows: number(self.deleted_rows, row),
            added_files: number(self.added_files, row),
            metadata_location: text(self.metadata_location, row),
            principal: text(self.principal, row),
        })
    }
}

fn number(array: &arrow_array::Int64Array, row: usize) -> Option<i64> {
    array.is_valid(row).then(|| array.value(row))
}

fn text(array: &arrow_array::StringArray, row: usize) -> Option<String> {
    array.is_valid(row).then(|| array.value(row).to_string())
}
