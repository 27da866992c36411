//! Change scans (`Client::changes`): exactly the rows of a seq range, the same split into
//! several endpoints read in parallel, non-append commits listed, an expired range, bad
//! ranges, and endpoints that name other locations.

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use futures::StreamExt;
use icefloe_feed::{ChangeScan, ChangeStream, Client, ClientOptions, Error, Include, NonAppend, Operation};
use tonic::Code;

use crate::common::{Server, TempDir, Writer, offline_appends, require_icefloe};

/// `(seq, id, operation)` of every row, sorted (endpoints arrive in no particular order).
fn rows(batches: &[RecordBatch]) -> Vec<(i64, i64, String)> {
    let mut out = Vec::new();
    for batch in batches {
        let seq = batch.column_by_name("_seq").unwrap().as_primitive::<Int64Type>();
        let id = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let op = batch.column_by_name("_operation").unwrap().as_string::<i32>();
        for i in 0..batch.num_rows() {
            out.push((seq.value(i), id.value(i), op.value(i).to_string()));
        }
    }
    out.sort();
    out
}

fn appended(seq: i64, ids: std::ops::Range<i64>) -> Vec<(i64, i64, String)> {
    ids.map(|id| (seq, id, "append".to_string())).collect()
}

async fn scan(client: &Client, scan: ChangeScan) -> (ChangeStream, Vec<(i64, i64, String)>) {
    let stream = client.changes(scan).await.expect("change scan planned");
    let schema = stream.schema();
    let mut batches = Vec::new();
    let mut stream = stream;
    while let Some(batch) = stream.next().await {
        let batch = batch.expect("change scan batch");
        assert_eq!(batch.schema().fields(), schema.fields());
        batches.push(batch);
    }
    (stream, rows(&batches))
}

async fn setup(server: &Server) -> Writer {
    let mut writer = Writer::connect(&server.uri).await;
    writer.sql("CREATE SCHEMA ns").await;
    writer.sql("CREATE TABLE ns.t (id BIGINT, v VARCHAR)").await;
    writer.sql("CREATE TABLE ns.other (id BIGINT, v VARCHAR)").await;
    writer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_rows_of_a_range_split_or_not() {
    let bin = require_icefloe!();
    let dir = TempDir::new("changes");
    let mut server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = setup(&server).await;
    let mut seqs = Vec::new();
    for i in 0..5 {
        seqs.push(writer.append("ns.t", i * 10..i * 10 + 2).await);
    }
    let other = writer.append("ns.other", 999..1000).await;
    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();

    let (stream, got) = scan(&client, ChangeScan::new("ns.t", seqs[1], seqs[3])).await;
    let mut want = appended(seqs[2], 20..22);
    want.extend(appended(seqs[3], 30..32));
    assert_eq!(got, want);
    let names: Vec<_> = stream.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, ["id", "v", "_seq", "_snapshot_id", "_operation"]);
    assert_eq!(stream.total_records(), Some(4));
    assert!(stream.non_appends().is_empty());

    // An empty range has the schema and no rows.
    let (empty, got) = scan(&client, ChangeScan::new("ns.t", seqs[2], seqs[2])).await;
    assert!(got.is_empty());
    assert_eq!(empty.schema().fields().len(), 5);

    // The whole history, unsplit, split per file (one endpoint per append, read in
    // parallel and one at a time) and capped: the same rows every time.
    let whole = ChangeScan::new("ns.t", seqs[0] - 1, other);
    let (_, unsplit) = scan(&client, whole.clone()).await;
    let want: Vec<_> = (0..5)
        .flat_map(|i| appended(seqs[i], i as i64 * 10..i as i64 * 10 + 2))
        .collect();
    assert_eq!(unsplit, want);
    let per_file = ChangeScan {
        target_partition_bytes: Some(1),
        ..whole.clone()
    };
    let (split, got) = scan(&client, per_file.clone()).await;
    assert_eq!(split.endpoints(), 5);
    assert_eq!(got, unsplit);
    let (_, got) = scan(
        &client,
        ChangeScan {
            parallelism: Some(1),
            ..per_file.clone()
        },
    )
    .await;
    assert_eq!(got, unsplit);
    let (capped, got) = scan(
        &client,
        ChangeScan {
            max_partitions: Some(2),
            ..per_file
        },
    )
    .await;
    assert_eq!(capped.endpoints(), 2);
    assert_eq!(got, unsplit);

    // Ranges the server cannot answer: beyond the head, reversed, an unknown table.
    let head = other;
    match client.changes(ChangeScan::new("ns.t", 0, head + 5)).await {
        Err(e @ Error::Status(_)) => {
            assert_eq!(e.code(), Some(Code::InvalidArgument));
            assert!(e.to_string().contains("beyond the commit head"), "{e}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match client.changes(ChangeScan::new("ns.t", seqs[3], seqs[1])).await {
        Err(e) => assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}"),
        Ok(stream) => panic!("a reversed range was planned: {stream:?}"),
    }
    match client.changes(ChangeScan::new("ns.nope", seqs[3], seqs[4])).await {
        Err(e) => assert_eq!(e.code(), Some(Code::NotFound), "{e}"),
        Ok(stream) => panic!("an unknown table was planned: {stream:?}"),
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_listed_or_read_as_rows() {
    let bin = require_icefloe!();
    let dir = TempDir::new("changes-delete");
    let mut server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = setup(&server).await;
    let first = writer.append("ns.t", 0..3).await;
    writer.sql("DELETE FROM ns.t WHERE id = 1").await;
    let deleted = first + 1;
    let last = writer.append("ns.t", 3..5).await;
    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();

    let (stream, got) = scan(&client, ChangeScan::new("ns.t", first - 1, last)).await;
    let mut want = appended(first, 0..3);
    want.extend(appended(last, 3..5));
    assert_eq!(got, want, "appends only: the deleted row was appended in the range");
    assert_eq!(
        stream.non_appends(),
        [NonAppend {
            seq: deleted,
            operation: Operation::Delete,
            data_change: true
        }]
    );

    let all = ChangeScan {
        include: Include::All,
        ..ChangeScan::new("ns.t", first - 1, last)
    };
    let (stream, got) = scan(&client, all).await;
    want.push((deleted, 1, "delete".to_string()));
    want.sort();
    assert_eq!(got, want, "the delete as a row, the file's other rows cancelled out");
    assert!(stream.non_appends().is_empty(), "{:?}", stream.non_appends());
    assert_eq!(stream.total_records(), None);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_range_is_cursor_expired() {
    let bin = require_icefloe!();
    let dir = TempDir::new("changes-expired");
    let warehouse = dir.path().join("wh");
    // Four appends offline, then the log is trimmed to its two newest records.
    let trim = "head = cat.log.head()\ncat.log.trim(head - 2)\nprint(head)";
    let head: i64 = offline_appends(&bin, &warehouse, "ns.t", &[&[0], &[1], &[2], &[3]], trim)
        .parse()
        .expect("head seq");
    let mut server = Server::start(&bin, &warehouse, &[]);
    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    match client.changes(ChangeScan::new("ns.t", 0, head)).await {
        Err(Error::CursorExpired { log_start, message }) => {
            assert_eq!(log_start, Some(head - 1));
            assert!(message.starts_with("cursor expired"), "{message}");
        }
        other => panic!("expected CursorExpired, got {other:?}"),
    }
    let (_, got) = scan(&client, ChangeScan::new("ns.t", head - 2, head)).await;
    assert_eq!(got, [(head - 1, 2, "append".into()), (head, 3, "append".into())]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_with_locations_are_read_there() {
    let bin = require_icefloe!();
    let dir = TempDir::new("changes-locations");
    let mut server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = setup(&server).await;
    let first = writer.append("ns.t", 0..2).await;
    let last = writer.append("ns.t", 2..4).await;
    drop(writer);
    let range = ChangeScan {
        target_partition_bytes: Some(1),
        ..ChangeScan::new("ns.t", first - 1, last)
    };
    // Nothing listens on port 1: endpoints naming only it cannot be read, which shows the
    // client goes to the named location rather than the server it asked.
    let dead = "grpc://127.0.0.1:1";
    let uri = server.uri.clone();
    let mut server = tokio::task::spawn_blocking(move || {
        server.restart_with(&["--advertise-uri", dead]);
        server
    })
    .await
    .unwrap();
    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let mut stream = client.changes(range.clone()).await.unwrap();
    assert_eq!(stream.endpoints(), 2);
    match stream.next().await {
        Some(Err(Error::Transport(_))) => {}
        other => panic!("expected a transport error for {dead}, got {other:?}"),
    }
    assert!(stream.next().await.is_none(), "the stream ends after its first error");

    // With the server itself as the second location, the first one that answers is used.
    let mut server = tokio::task::spawn_blocking(move || {
        server.restart_with(&["--advertise-uri", dead, "--advertise-uri", &uri]);
        server
    })
    .await
    .unwrap();
    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let (_, got) = scan(&client, range).await;
    let mut want = appended(first, 0..2);
    want.extend(appended(last, 2..4));
    assert_eq!(got, want);
    server.stop();
}
