//! commits.v1: replay from earliest / a seq / latest, table globs, every commit kind,
//! heartbeats.

use std::time::Duration;

use futures::StreamExt;
use icefloe_feed::{Client, ClientOptions, CommitEvent, Cursor, Error, Operation, Subscription};

use crate::common::{Server, TempDir, Writer, events_until, require_icefloe, seqs};

const WAIT: Duration = Duration::from_secs(30);

fn ops(events: &[CommitEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| (e.operation.to_string(), e.qualified_name()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(op, name)| (op.to_string(), name.to_string()))
        .collect()
}

#[tokio::test]
async fn replay_globs_and_every_commit_kind() {
    let bin = require_icefloe!();
    let dir = TempDir::new("commits");
    let server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = Writer::connect(&server.uri).await;

    writer.sql("CREATE SCHEMA sales").await;
    writer.sql("CREATE TABLE sales.orders (id BIGINT, v VARCHAR)").await;
    let appended = writer.append("sales.orders", 0..3).await;
    writer.sql("INSERT INTO sales.orders VALUES (10, 'x'), (11, 'y')").await;
    writer.sql("UPDATE sales.orders SET v = 'z' WHERE id = 10").await;
    writer.sql("DELETE FROM sales.orders WHERE id = 0").await;
    writer.sql("ALTER TABLE sales.orders ADD COLUMN note VARCHAR").await;
    writer.sql("CREATE SCHEMA other").await;
    writer.sql("CREATE TABLE other.t (id BIGINT)").await;
    writer.sql("ALTER TABLE sales.orders RENAME TO orders_old").await;
    writer.sql("DROP TABLE other.t").await;

    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let mut all = client.subscribe(Subscription::after(Cursor::Earliest)).await.unwrap();
    assert_eq!(all.log_start(), Some(1));
    let events = events_until(&mut all, 9, WAIT).await;
    assert_eq!(seqs(&events), (1..=9).collect::<Vec<_>>());
    assert_eq!(
        ops(&events),
        pairs(&[
            ("create", "sales.orders"),
            ("append", "sales.orders"),
            ("append", "sales.orders"),
            ("overwrite", "sales.orders"),
            ("delete", "sales.orders"),
            ("schema", "sales.orders"),
            ("create", "other.t"),
            ("rename", "sales.orders_old"),
            ("drop", "other.t"),
        ])
    );

    // Every field of the event schema is decoded.
    let append = &events[1];
    assert_eq!(append.seq, appended);
    assert_eq!(append.operation, Operation::Append);
    assert_eq!(append.added_rows, Some(3));
    assert!(append.added_files.is_some_and(|n| n >= 1));
    assert!(append.snapshot_id.is_some());
    assert_eq!(append.table_uuid, events[0].table_uuid);
    assert!(append.table_uuid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(
        append
            .metadata_location
            .as_deref()
            .is_some_and(|l| l.ends_with(".metadata.json"))
    );
    assert_eq!(append.principal, None); // no --users
    let second = &events[2];
    assert_eq!(second.parent_snapshot_id, append.snapshot_id);
    assert!(events[4].deleted_rows.is_some_and(|n| n >= 1)); // copy-on-write: the rows of the files it replaced
    let age = chrono::Utc::now() - append.committed_at;
    assert!(
        age > chrono::TimeDelta::zero() && age < chrono::TimeDelta::minutes(5),
        "{age}"
    );
    let json = serde_json::to_value(append).unwrap();
    for key in [
        "seq",
        "committed_at",
        "namespace",
        "table",
        "table_uuid",
        "operation",
        "snapshot_id",
        "parent_snapshot_id",
        "added_rows",
        "deleted_rows",
        "added_files",
        "metadata_location",
        "principal",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
    assert_eq!(json["operation"], "append");
    assert!(json["committed_at"].as_str().unwrap().ends_with("+00:00"));

    // From a seq: exactly the later events.
    let mut from_seq = client.subscribe(Subscription::after(Cursor::Seq(6))).await.unwrap();
    assert_eq!(seqs(&events_until(&mut from_seq, 9, WAIT).await), vec![7, 8, 9]);

    // Globs: a rename matches by its old name too.
    let sub = |tables: &[&str]| Subscription {
        after: Cursor::Earliest,
        tables: tables.iter().map(|t| t.to_string()).collect(),
        ..Subscription::default()
    };
    let mut orders = client.subscribe(sub(&["sales.orders"])).await.unwrap();
    assert_eq!(
        seqs(&events_until(&mut orders, 8, WAIT).await),
        vec![1, 2, 3, 4, 5, 6, 8]
    );
    let mut others = client.subscribe(sub(&["other.*"])).await.unwrap();
    assert_eq!(seqs(&events_until(&mut others, 9, WAIT).await), vec![7, 9]);
    let mut renamed = client.subscribe(sub(&["*.orders_old", "nothing.*"])).await.unwrap();
    assert_eq!(seqs(&events_until(&mut renamed, 8, WAIT).await), vec![8]);

    // Latest: no replay, the next commit live.
    let mut latest = client.subscribe(Subscription::after(Cursor::Latest)).await.unwrap();
    assert_eq!(latest.position(), Some(9));
    writer.sql("CREATE TABLE sales.more (id BIGINT)").await;
    let live = events_until(&mut latest, 10, WAIT).await;
    assert_eq!(ops(&live), pairs(&[("create", "sales.more")]));

    // A malformed subscription is refused at once, not retried.
    let bad = client
        .subscribe(Subscription {
            tables: vec!["no_namespace".into()],
            ..Subscription::default()
        })
        .await;
    match bad {
        Err(Error::Status(status)) => assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[tokio::test]
async fn heartbeats_move_the_cursor_past_commits_that_did_not_match() {
    let bin = require_icefloe!();
    let dir = TempDir::new("heartbeat");
    let server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = Writer::connect(&server.uri).await;
    writer.sql("CREATE SCHEMA ns").await;
    writer.sql("CREATE TABLE ns.a (id BIGINT, v VARCHAR)").await;

    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let mut quiet = client
        .subscribe(Subscription {
            after: Cursor::Earliest,
            tables: vec!["elsewhere.*".into()],
            heartbeat: Duration::from_millis(100),
            ..Subscription::default()
        })
        .await
        .unwrap();
    assert_eq!(quiet.heartbeat_head(), None);
    let seq = writer.append("ns.a", 0..2).await;

    // Poll in the background (a heartbeat is read while waiting for an event that never
    // comes) and watch the head from here.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(item) = tokio::time::timeout(Duration::from_millis(50), quiet.next()).await {
            panic!("nothing should match, got {item:?}");
        }
        if quiet.heartbeat_head() == Some(seq) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no heartbeat with head {seq}: {:?}",
            quiet.heartbeat_head()
        );
    }
    assert_eq!(quiet.position(), Some(seq));
}
