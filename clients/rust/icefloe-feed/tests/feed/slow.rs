//! A consumer that sleeps: its stream's window fills, the server moves it to the log path,
//! and when it wakes it catches up with no gap.

use std::time::Duration;

use icefloe_feed::{Client, ClientOptions, Cursor, Subscription};

use crate::common::{Server, TempDir, Writer, events_until, require_icefloe, seqs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_consumer_catches_up_with_no_gap() {
    let bin = require_icefloe!();
    let dir = TempDir::new("slow");
    // Debug logging shows when the fan-out hands a stalled stream back to the log path.
    let server = Server::start(&bin, &dir.path().join("wh"), &["--log-level", "debug"]);
    let mut writer = Writer::connect(&server.uri).await;
    writer.sql("CREATE SCHEMA ns").await;
    writer.sql("CREATE TABLE ns.a (id BIGINT, v VARCHAR)").await;

    // A small window: the server can be only ~64 KiB ahead of this consumer.
    let options = ClientOptions {
        flow_control_window: Some(65_535),
        ..ClientOptions::default()
    };
    let client = Client::connect(&server.uri, options).await.unwrap();
    let mut sleeper = client.subscribe(Subscription::after(Cursor::Latest)).await.unwrap();
    let from = sleeper.position().unwrap();
    // A live consumer on the same server keeps up meanwhile.
    let live_client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let mut live = live_client
        .subscribe(Subscription::after(Cursor::Latest))
        .await
        .unwrap();

    let mut last = from;
    let mut stalled = false;
    for round in 0..20 {
        for i in 0..40 {
            last = writer.append("ns.a", round * 100 + i..round * 100 + i + 1).await;
        }
        stalled = server.log().contains("feed stream stalled in a write");
        if stalled {
            break;
        }
    }
    assert!(
        stalled,
        "the server never found the sleeping stream stalled (appended up to seq {last})"
    );
    let live_events = events_until(&mut live, last, Duration::from_secs(60)).await;
    assert_eq!(
        seqs(&live_events),
        (from + 1..=last).collect::<Vec<_>>(),
        "live consumer"
    );

    // Now wake up: everything since the subscription, in order, once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let events = events_until(&mut sleeper, last, Duration::from_secs(60)).await;
    assert_eq!(
        seqs(&events),
        (from + 1..=last).collect::<Vec<_>>(),
        "sleeping consumer"
    );
    assert_eq!(sleeper.reconnects(), 0, "caught up on the same stream");
}
