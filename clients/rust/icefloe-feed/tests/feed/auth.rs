//! Login with each role, a bad password, bearer tokens and their renewal.

use std::time::{Duration, Instant};

use icefloe_feed::{ChangeScan, Client, ClientOptions, Cursor, Error, Subscription};

use crate::common::{Server, TempDir, Writer, events_until, password_hash, require_icefloe, write};

const USERS: [(&str, &str); 3] = [("reader", "read"), ("writer", "write"), ("boss", "admin")];

fn users_file(bin: &std::path::Path, dir: &TempDir) -> std::path::PathBuf {
    let mut toml = String::new();
    for (name, role) in USERS {
        let hash = password_hash(bin, &format!("{name}-password"));
        toml.push_str(&format!(
            "[users.{name}]\nrole = \"{role}\"\npassword_hash = \"{hash}\"\n\n"
        ));
    }
    let path = dir.path().join("users.toml");
    write(&path, toml.as_bytes());
    std::process::Command::new("chmod")
        .args(["600"])
        .arg(&path)
        .status()
        .unwrap();
    path
}

fn code(error: &Error) -> Option<tonic::Code> {
    error.code()
}

#[tokio::test]
async fn each_role_subscribes_and_a_bad_password_is_refused() {
    let bin = require_icefloe!();
    let dir = TempDir::new("auth");
    let users = users_file(&bin, &dir);
    let server = Server::start(&bin, &dir.path().join("wh"), &["--users", users.to_str().unwrap()]);

    let mut clients = Vec::new();
    for (name, _) in USERS {
        let options = ClientOptions::default().with_basic(name, format!("{name}-password"));
        let client = Client::connect(&server.uri, options)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(client.token().is_some(), "{name} got a bearer token");
        clients.push(client);
    }

    // Commits by the writer and the admin carry their names as principal.
    let mut as_writer = Writer::connect_with(&server.uri, clients[1].token().as_deref(), None).await;
    as_writer.sql("CREATE SCHEMA ns").await;
    as_writer.sql("CREATE TABLE ns.a (id BIGINT, v VARCHAR)").await;
    as_writer.append("ns.a", 0..2).await;
    let mut as_admin = Writer::connect_with(&server.uri, clients[2].token().as_deref(), None).await;
    as_admin
        .sql("ALTER TABLE ns.a SET ('icefloe.snapshots.retain' = '50')")
        .await;
    // The read role may not write.
    let mut as_reader = Writer::connect_with(&server.uri, clients[0].token().as_deref(), None).await;
    let refused = as_reader.try_append("ns.a", 5..6).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");

    // Every role may follow the feed.
    for (client, (name, _)) in clients.iter().zip(USERS) {
        let mut events = client.subscribe(Subscription::after(Cursor::Earliest)).await.unwrap();
        let got = events_until(&mut events, 3, Duration::from_secs(30)).await;
        let principals: Vec<_> = got.iter().map(|e| e.principal.clone().unwrap_or_default()).collect();
        assert_eq!(principals, ["writer", "writer", "boss"], "as {name}");
    }

    // Change scans need the read role too, and send the login's token.
    let rows = clients[0]
        .changes(ChangeScan::new("ns.a", 0, 3))
        .await
        .unwrap()
        .collect_batches()
        .await
        .unwrap();
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 2);

    // A token obtained elsewhere works as credentials.
    let by_token = ClientOptions::default().with_token(clients[0].token().unwrap());
    let client = Client::connect(&server.uri, by_token).await.unwrap();
    client.subscribe(Subscription::default()).await.unwrap();

    // Bad password, unknown user: refused at connect.
    for (user, password) in [("reader", "wrong"), ("nobody", "reader-password")] {
        let options = ClientOptions::default().with_basic(user, password);
        let error = Client::connect(&server.uri, options).await.unwrap_err();
        assert_eq!(code(&error), Some(tonic::Code::Unauthenticated), "{user}: {error}");
    }
    // No credentials, or a forged token: the subscription is refused (not retried forever).
    let anonymous = Client::connect(&server.uri, ClientOptions::default()).await.unwrap();
    let error = anonymous.subscribe(Subscription::default()).await.unwrap_err();
    assert_eq!(code(&error), Some(tonic::Code::Unauthenticated), "{error}");
    let error = anonymous.changes(ChangeScan::new("ns.a", 0, 3)).await.unwrap_err();
    assert_eq!(code(&error), Some(tonic::Code::Unauthenticated), "{error}");
    let forged = Client::connect(&server.uri, ClientOptions::default().with_token("not-a-token"))
        .await
        .unwrap();
    let error = forged.subscribe(Subscription::default()).await.unwrap_err();
    assert_eq!(code(&error), Some(tonic::Code::Unauthenticated), "{error}");
}

#[tokio::test]
async fn a_renewed_token_is_picked_up_and_an_expired_one_leads_to_a_new_login() {
    let bin = require_icefloe!();
    let dir = TempDir::new("renew");
    let users = users_file(&bin, &dir);
    let server = Server::start(
        &bin,
        &dir.path().join("wh"),
        &["--users", users.to_str().unwrap(), "--token-ttl", "4"],
    );

    let login = ClientOptions::default().with_basic("reader", "reader-password");
    let by_password = Client::connect(&server.uri, login).await.unwrap();
    let logged_in = Instant::now();
    let first = by_password.token().unwrap();
    let by_token = Client::connect(&server.uri, ClientOptions::default().with_token(first.clone()))
        .await
        .unwrap();

    // Past half its lifetime, a call's answer carries a fresh token.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    drop(by_token.subscribe(Subscription::default()).await.unwrap());
    let renewed = by_token.token().unwrap();
    assert_ne!(renewed, first, "the renewed token was picked up");

    // Once the first token has expired it is refused, but the renewed one still works ...
    tokio::time::sleep(Duration::from_millis(4300).saturating_sub(logged_in.elapsed())).await;
    let stale = Client::connect(&server.uri, ClientOptions::default().with_token(first.clone()))
        .await
        .unwrap();
    let error = stale.subscribe(Subscription::default()).await.unwrap_err();
    assert_eq!(error.code(), Some(tonic::Code::Unauthenticated), "{error}");
    by_token.subscribe(Subscription::default()).await.unwrap();

    // ... and a client with a password logs in again by itself: for a change scan (which
    // then gets as far as the missing table) and for the feed.
    let error = by_password.changes(ChangeScan::new("ns.nope", 0, 0)).await.unwrap_err();
    assert_eq!(error.code(), Some(tonic::Code::NotFound), "{error}");
    let relogged = by_password.token().unwrap();
    assert!(relogged != first && relogged != renewed);
    by_password.subscribe(Subscription::default()).await.unwrap();
}

#[tokio::test]
async fn a_change_scan_planned_before_its_token_expired_logs_in_again_for_its_reads() {
    let bin = require_icefloe!();
    let dir = TempDir::new("renew-doget");
    let users = users_file(&bin, &dir);
    let server = Server::start(
        &bin,
        &dir.path().join("wh"),
        &["--users", users.to_str().unwrap(), "--token-ttl", "3"],
    );
    let writer = Client::connect(
        &server.uri,
        ClientOptions::default().with_basic("writer", "writer-password"),
    )
    .await
    .unwrap();
    let mut as_writer = Writer::connect_with(&server.uri, writer.token().as_deref(), None).await;
    as_writer.sql("CREATE SCHEMA ns").await;
    as_writer.sql("CREATE TABLE ns.a (id BIGINT, v VARCHAR)").await;
    for start in [0, 10, 20] {
        as_writer.append("ns.a", start..start + 4).await;
    }

    let reader = Client::connect(
        &server.uri,
        ClientOptions::default().with_basic("reader", "reader-password"),
    )
    .await
    .unwrap();
    let first = reader.token().unwrap();
    // Planned with a fresh token (no renewal yet); read only once that token has expired.
    let scan = ChangeScan {
        max_partitions: Some(3),
        target_partition_bytes: Some(1),
        ..ChangeScan::new("ns.a", 0, 4)
    };
    let stream = reader.changes(scan).await.unwrap();
    assert!(stream.endpoints() > 1, "several DoGets, each refused once");
    tokio::time::sleep(Duration::from_millis(3400)).await;
    let batches = stream.collect_batches().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 12);
    assert_ne!(reader.token().unwrap(), first, "the reads logged in again");

    // Without a password there is nothing to log in with: the expired token is refused.
    let by_token = Client::connect(
        &server.uri,
        ClientOptions::default().with_token(reader.token().unwrap()),
    )
    .await
    .unwrap();
    let stream = by_token.changes(ChangeScan::new("ns.a", 0, 4)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3400)).await;
    let error = stream.collect_batches().await.unwrap_err();
    assert_eq!(code(&error), Some(tonic::Code::Unauthenticated), "{error}");
}
