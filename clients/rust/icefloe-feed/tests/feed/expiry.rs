//! An expired cursor is its own error, both for a new subscription and for a stream whose
//! cursor the log no longer reaches when it reconnects.

use std::time::Duration;

use futures::StreamExt;
use icefloe_feed::{Client, ClientOptions, Cursor, Error, Subscription};

use crate::common::{Server, TempDir, Writer, events_until, require_icefloe};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_cursor_is_reported_not_skipped() {
    let bin = require_icefloe!();
    let dir = TempDir::new("expiry");
    let mut server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let mut writer = Writer::connect(&server.uri).await;
    writer.sql("CREATE SCHEMA ns").await;
    writer.sql("CREATE TABLE ns.a (id BIGINT, v VARCHAR)").await;
    for i in 0..4 {
        writer.append("ns.a", i..i + 1).await;
    }
    drop(writer);

    let client = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let mut live = client.subscribe(Subscription::after(Cursor::Earliest)).await.unwrap();
    events_until(&mut live, 5, Duration::from_secs(30)).await;
    assert_eq!(live.position(), Some(5));

    // While the server is down, three more commits land offline and the log is trimmed
    // to its newest record (what commit-log.retain-count does in the server's sweep).
    server.stop();
    let warehouse = server.warehouse.display().to_string();
    let start = server.python(&format!(
        r#"
import pyarrow as pa
from catalog import RocksCatalog
cat = RocksCatalog("icefloe", warehouse={warehouse:?}, **{{"read-only": "false", "commit-log.retain-count": "1"}})
table = cat.load_table("ns.a")
for i in range(3):
    table.append(pa.table({{"id": pa.array([100 + i], pa.int64()), "v": ["x"]}}))
# The server's sweep first brings its lineage index up to the head, whose commit-log hold then
# lets the trim through; this process runs no index, so it lets go of that hold instead.
cat.log.release_hold("lineage-index")
print(cat.trim_commit_log())
cat.close()
"#
    ));
    assert_eq!(start, "8");
    let mut server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();

    // The live stream reconnects with after=5 and learns that 6 and 7 are gone.
    match tokio::time::timeout(Duration::from_secs(30), live.next()).await {
        Ok(Some(Err(Error::CursorExpired { log_start, message }))) => {
            assert_eq!(log_start, Some(8));
            assert!(message.contains("cursor expired"), "{message}");
        }
        other => panic!("expected CursorExpired, got {other:?}"),
    }
    assert!(live.next().await.is_none(), "the stream ends after the error");

    // A new subscription from an old seq is refused the same way, at once.
    match client.subscribe(Subscription::after(Cursor::Seq(2))).await {
        Err(Error::CursorExpired { log_start: Some(8), .. }) => {}
        other => panic!("expected CursorExpired, got {other:?}"),
    }
    // From the log start on is fine: earliest is seq 8.
    let mut earliest = client.subscribe(Subscription::after(Cursor::Earliest)).await.unwrap();
    let events = events_until(&mut earliest, 8, Duration::from_secs(30)).await;
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![8]);
    server.stop();
}
