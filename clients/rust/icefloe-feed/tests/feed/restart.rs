//! kill -9 the server mid-stream and restart it on the same warehouse: every event exactly
//! once, for the library stream and for `icefloe-tail`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use icefloe_feed::{Client, ClientOptions, CommitEvent, Cursor, Subscription};

use crate::common::{Server, TempDir, Writer, require_icefloe, seqs};

/// Appends until `count` were acknowledged, reconnecting through restarts; returns the
/// acknowledged seqs.
async fn keep_appending(uri: String, count: usize, acked: Arc<Mutex<Vec<i64>>>) {
    let mut writer: Option<Writer> = None;
    let mut id = 0;
    while acked.lock().unwrap().len() < count {
        let w = match &mut writer {
            Some(w) => w,
            None => match Writer::try_connect(&uri).await {
                Some(w) => writer.insert(w),
                None => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        match w.try_append("t.a", id..id + 10).await {
            Ok(seq) => acked.lock().unwrap().push(seq),
            Err(_) => {
                // The server is down or going down: what we sent may or may not have
                // landed; the feed will tell. Try again on a new connection.
                writer = None;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        id += 10;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for(acked: &Arc<Mutex<Vec<i64>>>, count: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while acked.lock().unwrap().len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "appends stopped at {:?}",
            acked.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_mid_stream_gives_every_event_exactly_once() {
    let bin = require_icefloe!();
    let dir = TempDir::new("restart");
    let mut server = Server::start(&bin, &dir.path().join("wh"), &[]);
    let uri = server.uri.clone();
    let mut setup = Writer::connect(&uri).await;
    setup.sql("CREATE SCHEMA t").await;
    setup.sql("CREATE TABLE t.a (id BIGINT, v VARCHAR)").await;
    drop(setup);

    // The library stream, consumed in a task.
    let client = Client::connect(&uri, ClientOptions::default()).await.unwrap();
    let mut stream = client.subscribe(Subscription::after(Cursor::Earliest)).await.unwrap();
    let seen: Arc<Mutex<Vec<CommitEvent>>> = Arc::default();
    let consumer = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                seen.lock().unwrap().push(event.expect("the stream only yields events"));
            }
        })
    };

    // icefloe-tail alongside it.
    let mut tail = Command::new(env!("CARGO_BIN_EXE_icefloe-tail"))
        .args(["--uri", &uri, "--after", "earliest", "--heartbeat-ms", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start icefloe-tail");
    let lines: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    {
        let lines = Arc::clone(&lines);
        let stdout = tail.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                let value: serde_json::Value = serde_json::from_str(&line).expect("one JSON object per line");
                lines.lock().unwrap().push(value);
            }
        });
    }

    let acked: Arc<Mutex<Vec<i64>>> = Arc::default();
    let appender = tokio::spawn(keep_appending(uri.clone(), 45, Arc::clone(&acked)));
    for kill_after in [10, 25] {
        wait_for(&acked, kill_after).await;
        server.kill9(); // while appends and the feed are in flight
        tokio::time::sleep(Duration::from_millis(300)).await;
        server = tokio::task::spawn_blocking(move || {
            server.restart();
            server
        })
        .await
        .unwrap();
    }
    appender.await.unwrap();
    let last = *acked.lock().unwrap().iter().max().unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let caught_up = |n: usize| n > 0;
    loop {
        let lib_last = seen.lock().unwrap().last().map(|e| e.seq);
        let tail_last = lines.lock().unwrap().last().and_then(|v| v["seq"].as_i64());
        if lib_last >= Some(last) && tail_last >= Some(last) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not caught up to {last}: library at {lib_last:?}, icefloe-tail at {tail_last:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    consumer.abort();
    let _ = tail.kill();
    let _ = tail.wait();
    assert!(caught_up(1));

    // All tables are followed, so the stream holds every commit: 1, 2, 3, ... with no gap
    // and no repeat, across both crashes. Every acknowledged append is among them.
    let events = seen.lock().unwrap().clone();
    let got = seqs(&events);
    let upto: Vec<i64> = got.iter().copied().take_while(|s| *s <= last).collect();
    assert_eq!(upto, (1..=last).collect::<Vec<_>>(), "library stream");
    for seq in acked.lock().unwrap().iter() {
        assert!(got.contains(seq), "acknowledged seq {seq} missing");
    }
    let tail_seqs: Vec<i64> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|v| v["seq"].as_i64().unwrap())
        .collect();
    let tail_upto: Vec<i64> = tail_seqs.iter().copied().take_while(|s| *s <= last).collect();
    assert_eq!(tail_upto, (1..=last).collect::<Vec<_>>(), "icefloe-tail");
    let first = &lines.lock().unwrap()[0];
    assert_eq!(first["operation"], "create");
    assert_eq!(first["namespace"], "t");
    assert_eq!(first["table"], "a");
    assert_eq!(
        first.as_object().unwrap().len(),
        13,
        "the event schema's 13 fields: {first}"
    );
}
