//! The Rust reader of `benchmarks/bench_rust_change_scan.py`: the same change scan, split
//! into up to `max_partitions` endpoints, read with [`Client::changes`] at several
//! parallelisms (endpoints read at once), alternating, after one warm-up read each.
//!
//! ```text
//! bench_changes <location> <table> <after> <until> <max_partitions> <rounds> <p1,p2,...>
//! ```
//!
//! It prints one JSON line per read: `{"parallelism", "ms", "rows", "endpoints"}`.

use std::time::Instant;

use futures::StreamExt;
use icefloe_feed::{ChangeScan, Client, ClientOptions};

fn fail(message: String) -> ! {
    eprintln!("bench_changes: {message}");
    std::process::exit(1)
}

fn number<T: std::str::FromStr>(name: &str, text: &str) -> T {
    text.parse().unwrap_or_else(|_| fail(format!("bad {name} {text:?}")))
}

/// One full read: (rows, endpoints).
async fn read(client: &Client, scan: ChangeScan) -> (usize, usize) {
    let mut stream = client
        .changes(scan)
        .await
        .unwrap_or_else(|e| fail(format!("plan: {e}")));
    let endpoints = stream.endpoints();
    let mut rows = 0;
    while let Some(batch) = stream.next().await {
        rows += batch.unwrap_or_else(|e| fail(format!("read: {e}"))).num_rows();
    }
    (rows, endpoints)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [location, table, after, until, max_partitions, rounds, parallelisms] = args.as_slice() else {
        fail("usage: bench_changes <location> <table> <after> <until> <max_partitions> <rounds> <p1,p2,...>".into())
    };
    let base = ChangeScan {
        // One endpoint per file up to the cap: the split is the server's, not the data's size.
        target_partition_bytes: Some(1),
        max_partitions: Some(number("max_partitions", max_partitions)),
        ..ChangeScan::new(table.clone(), number("after", after), number("until", until))
    };
    let rounds: usize = number("rounds", rounds);
    let parallelisms: Vec<usize> = parallelisms.split(',').map(|p| number("parallelism", p)).collect();
    let client = Client::connect(location, ClientOptions::default())
        .await
        .unwrap_or_else(|e| fail(format!("connect {location}: {e}")));
    let scan = |p: usize| ChangeScan {
        parallelism: Some(p),
        ..base.clone()
    };
    for &p in &parallelisms {
        read(&client, scan(p)).await; // warm-up: the server's plan cache, the connection
    }
    for round in 0..rounds {
        let mut order = parallelisms.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for p in order {
            let started = Instant::now();
            let (rows, endpoints) = read(&client, scan(p)).await;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            println!(r#"{{"parallelism": {p}, "ms": {ms:.3}, "rows": {rows}, "endpoints": {endpoints}}}"#);
        }
    }
}
