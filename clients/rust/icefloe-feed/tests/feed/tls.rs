//! TLS with a test CA (rcgen), and mutual TLS.

use std::time::Duration;

use icefloe_feed::{ChangeScan, Client, ClientOptions, Cursor, Subscription};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::common::{Server, TempDir, Writer, events_until, offline_appends, require_icefloe, write};

struct Pki {
    ca_pem: Vec<u8>,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "icefloe-feed test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca_pem: ca_cert.pem().into_bytes(),
        server: leaf(vec!["127.0.0.1".into(), "localhost".into()]),
        client: leaf(vec!["feed-client".into()]),
    }
}

#[tokio::test]
async fn tls_and_mutual_tls() {
    let bin = require_icefloe!();
    let dir = TempDir::new("tls");
    let pki = pki();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    write(&dir.path().join("ca.pem"), &pki.ca_pem);
    write(&dir.path().join("server.pem"), pki.server.0.as_bytes());
    write(&dir.path().join("server.key"), pki.server.1.as_bytes());
    let tls_args = [
        "--tls-cert".to_string(),
        path("server.pem"),
        "--tls-key".into(),
        path("server.key"),
    ];
    let args: Vec<&str> = tls_args.iter().map(String::as_str).collect();

    let server = Server::start(&bin, &dir.path().join("wh"), &args);
    assert!(server.uri.starts_with("grpc+tls://"), "{}", server.uri);
    let mut writer = Writer::connect_with(&server.uri, None, Some(&pki.ca_pem)).await;
    writer.sql("CREATE SCHEMA ns").await;
    writer.sql("CREATE TABLE ns.a (id BIGINT, v VARCHAR)").await;

    let trusted = ClientOptions::default().with_root_certs_pem(pki.ca_pem.clone());
    let client = Client::connect(&server.uri, trusted).await.unwrap();
    let mut events = client.subscribe(Subscription::after(Cursor::Earliest)).await.unwrap();
    events_until(&mut events, 1, Duration::from_secs(30)).await;

    // A server whose certificate nobody vouched for is refused.
    assert!(Client::connect(&server.uri, ClientOptions::default()).await.is_err());
    drop(server);

    // Mutual TLS: only clients with a certificate from the client CA get in.
    let mut mtls_args = args.clone();
    let ca = path("ca.pem");
    mtls_args.extend(["--tls-client-ca", &ca]);
    // Two appends, made offline, for a change scan below.
    offline_appends(&bin, &dir.path().join("wh2"), "ns.a", &[&[1, 2], &[3]], "");
    let mut server = Server::start(&bin, &dir.path().join("wh2"), &mtls_args);
    let with_cert = ClientOptions::default()
        .with_root_certs_pem(pki.ca_pem.clone())
        .with_client_identity_pem(pki.client.0.clone(), pki.client.1.clone());
    let client = Client::connect(&server.uri, with_cert.clone()).await.unwrap();
    client.subscribe(Subscription::default()).await.unwrap();

    // Change-scan endpoints naming a grpc+tls:// location are read there, connected with
    // the same root certificates and client certificate.
    let uri = server.uri.clone();
    let mut advertised = mtls_args.clone();
    advertised.extend(["--advertise-uri", &uri]);
    server.restart_with(&advertised);
    let client = Client::connect(&server.uri, with_cert.clone()).await.unwrap();
    let scan = ChangeScan {
        target_partition_bytes: Some(1),
        ..ChangeScan::new("ns.a", 0, 3)
    };
    let changes = client.changes(scan).await.unwrap();
    assert_eq!(changes.endpoints(), 2);
    let batches = changes.collect_batches().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);

    let without_cert = ClientOptions::default().with_root_certs_pem(pki.ca_pem.clone());
    // Refused in the TLS handshake: either the connection fails, or (TLS 1.3, where the
    // client finishes its handshake first) every call does, and the stream keeps retrying.
    let attempt = tokio::time::timeout(Duration::from_secs(5), async {
        let client = Client::connect(&server.uri, without_cert).await?;
        client.subscribe(Subscription::default()).await
    })
    .await;
    assert!(
        !matches!(attempt, Ok(Ok(_))),
        "a client without a certificate got a subscription"
    );
}
