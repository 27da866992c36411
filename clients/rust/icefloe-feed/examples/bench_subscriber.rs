//! The Rust subscriber of `benchmarks/bench_feed.py`: N commit-feed streams in one process
//! (one task each, one shared connection), recording when each append event is yielded by
//! [`CommitStream`](icefloe_feed::CommitStream) — the latency a user of this crate sees.
//!
//! ```text
//! bench_subscriber <location> <streams N> <expected E> <stalled 0|1>
//! ```
//!
//! It prints `ready` once every stream has had its hello; then, unless stalled, one JSON
//! line: per stream, `[seq, arrival Unix ns, committed_at us]` for its first E appends.
//! Stalled, it never polls its streams and exits when a line arrives on stdin.

use std::io::BufRead;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use icefloe_feed::{Client, ClientOptions, Cursor, Operation, Subscription};

fn fail(message: String) -> ! {
    eprintln!("bench_subscriber: {message}");
    std::process::exit(1)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [location, streams, expected, stalled] = args.as_slice() else {
        fail("usage: bench_subscriber <location> <streams> <expected> <stalled 0|1>".into())
    };
    let streams: usize = streams
        .parse()
        .unwrap_or_else(|_| fail(format!("bad stream count {streams:?}")));
    let expected: usize = expected
        .parse()
        .unwrap_or_else(|_| fail(format!("bad expected count {expected:?}")));
    let stalled = stalled == "1";

    let client = Client::connect(location, ClientOptions::default())
        .await
        .unwrap_or_else(|e| fail(format!("connect {location}: {e}")));
    let subscription = Subscription {
        after: Cursor::Latest,
        tables: vec!["bench.*".into()],
        ..Subscription::default()
    };
    // Open every stream (each returns after its hello) before saying ready.
    let opened = futures::future::join_all((0..streams).map(|_| client.subscribe(subscription.clone()))).await;
    let mut feeds = Vec::with_capacity(streams);
    for (i, stream) in opened.into_iter().enumerate() {
        feeds.push(stream.unwrap_or_else(|e| fail(format!("stream {i}: {e}"))));
    }
    println!("ready");

    if stalled {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        std::process::exit(0);
    }
    let tasks = feeds.into_iter().enumerate().map(|(i, mut events)| {
        tokio::spawn(async move {
            let mut got: Vec<[i64; 3]> = Vec::with_capacity(expected);
            while got.len() < expected {
                let event = match events.next().await {
                    Some(Ok(event)) => event,
                    Some(Err(e)) => fail(format!("stream {i}: {e}")),
                    None => fail(format!("stream {i} ended after {} of {expected} appends", got.len())),
                };
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i64);
                // Only the writer's appends count (background compaction commits too).
                if event.operation == Operation::Append {
                    got.push([event.seq, now, event.committed_at.timestamp_micros()]);
                }
            }
            got
        })
    });
    let mut results = Vec::with_capacity(streams);
    for task in futures::future::join_all(tasks).await {
        results.push(task.unwrap_or_else(|e| fail(format!("stream task: {e}"))));
    }
    println!(
        "{}",
        serde_json::to_string(&results).unwrap_or_else(|e| fail(e.to_string()))
    );
}
