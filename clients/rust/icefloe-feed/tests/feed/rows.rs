//! rows.v1: appended rows with the commit columns and markers, through a server restart
//! and a schema change.

use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use futures::StreamExt;
use icefloe_feed::{Client, ClientOptions, Cursor, Error, Operation, RowStream, RowsItem};

use crate::common::{Server, TempDir, Writer, require_icefloe};

/// Items until the marker of `seq` arrived.
async fn until_commit(rows: &mut RowStream, seq: i64) -> Vec<RowsItem> {
    let mut out = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(30), rows.next())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for the marker of {seq}"))
            .expect("stream ended")
            .expect("rows item");
        let done = matches!(&item, RowsItem::Commit(marker) if marker.event.seq >= seq);
        out.push(item);
        if done {
            return out;
        }
    }
}

/// `(kind, seq, ids)` per item: "rows" with the ids of a batch, or the marker's operation.
fn summary(items: &[RowsItem]) -> Vec<(String, i64, Vec<i64>)> {
    items
        .iter()
        .map(|item| match item {
            RowsItem::Batch(batch) => {
                let seq = batch
                    .column_by_name("_seq")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .value(0);
                let ids = batch
                    .column_by_name("id")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec();
                ("rows".to_string(), seq, ids)
            }
            RowsItem::Commit(marker) => (marker.event.operation.to_string(), marker.event.seq, vec![]),
        })
        .collect()
}

fn row(kind: &str, seq: i64, ids: &[i64]) -> (String, i64, Vec<i64>) {
    (kind.to_string(), seq, ids.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_with_markers_through_a_restart_and_a_schema_change() {
    let bin = require_icefloe!();
    let dir = TempDir::new("rows");
    let mut server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = Writer::connect(&server.uri).await;
    writer.sql("CREATE SCHEMA ns").await;
    writer.sql("CREATE TABLE ns.r (id BIGINT, v VARCHAR)").await;
    let a = writer.append("ns.r", 0..3).await;
    let b = writer.append("ns.r", 3..5).await;

    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let mut rows = client.rows("ns.r", Cursor::Earliest).await.unwrap();
    let items = until_commit(&mut rows, b).await;
    assert_eq!(
        summary(&items),
        vec![
            row("create", 1, &[]),
            row("rows", a, &[0, 1, 2]),
            row("append", a, &[]),
            row("rows", b, &[3, 4]),
            row("append", b, &[])
        ]
    );
    let RowsItem::Batch(batch) = &items[1] else {
        unreachable!()
    };
    let names: Vec<_> = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, ["id", "v", "_seq", "_snapshot_id", "_operation"]);
    let RowsItem::Commit(marker) = &items[2] else {
        unreachable!()
    };
    assert_eq!(marker.event.operation, Operation::Append);
    assert_eq!(marker.event.added_rows, Some(3));
    let snapshot = batch
        .column_by_name("_snapshot_id")
        .unwrap()
        .as_primitive::<Int64Type>()
        .value(0);
    assert_eq!(Some(snapshot), marker.event.snapshot_id);
    assert_eq!(
        batch.column_by_name("_operation").unwrap().as_string::<i32>().value(0),
        "append"
    );
    assert_eq!(rows.position(), Some(b));

    // kill -9 and restart: the stream resumes after b, nothing repeats.
    server.kill9();
    let mut server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    let mut writer = Writer::connect(&server.uri).await;
    let c = writer.append("ns.r", 5..6).await;
    writer.sql("DELETE FROM ns.r WHERE id = 0").await;
    let items = until_commit(&mut rows, c + 1).await;
    assert_eq!(
        summary(&items),
        vec![row("rows", c, &[5]), row("append", c, &[]), row("delete", c + 1, &[])]
    );
    assert!(rows.reconnects() >= 1);

    // A schema change ends the stream, naming where to resume.
    writer.sql("ALTER TABLE ns.r ADD COLUMN note VARCHAR").await;
    let s = c + 2;
    let marker = tokio::time::timeout(Duration::from_secs(30), rows.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(&marker, RowsItem::Commit(m) if m.event.operation == Operation::Schema && m.event.seq == s));
    match tokio::time::timeout(Duration::from_secs(30), rows.next())
        .await
        .unwrap()
    {
        Some(Err(Error::SchemaChanged { resume_after, .. })) => assert_eq!(resume_after, s),
        other => panic!("expected SchemaChanged, got {other:?}"),
    }

    // Resubscribed after it: the new rows come with the new column.
    let mut rows = client.rows("ns.r", Cursor::Seq(s)).await.unwrap();
    let d = writer.append("ns.r", 6..8).await;
    let items = until_commit(&mut rows, d).await;
    assert_eq!(summary(&items), vec![row("rows", d, &[6, 7]), row("append", d, &[])]);
    let RowsItem::Batch(batch) = &items[0] else {
        unreachable!()
    };
    assert!(batch.column_by_name("note").is_some_and(|note| note.null_count() == 2));

    // An unknown table is refused at once.
    let error = client.rows("ns.nope", Cursor::Latest).await.unwrap_err();
    assert_eq!(error.code(), Some(tonic::Code::NotFound), "{error}");
    server.stop();
}
