//! Test support: a real `icefloe serve` child process, and a writer that commits through
//! Flight (DoPut appends, SQL writes over Flight SQL). No mocks.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor};
use arrow_schema::{DataType, Field, Schema};
use futures::{Stream, StreamExt, TryStreamExt};
use icefloe_feed::{CommitEvent, Result as FeedResult};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// The `icefloe` executable: `ICEFLOE_BIN`, else the repository's `.venv/bin/icefloe`.
pub fn icefloe_bin() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ICEFLOE_BIN") {
        return Some(PathBuf::from(path)).filter(|p| p.exists());
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    Some(repo.join(".venv/bin/icefloe")).filter(|p| p.exists())
}

/// Return from the test (it passes, with the reason printed) when there is no icefloe.
macro_rules! require_icefloe {
    () => {
        match crate::common::icefloe_bin() {
            Some(bin) => bin,
            None => {
                eprintln!(
                    "SKIPPED: no icefloe executable (set ICEFLOE_BIN or run ./scripts/test once to create .venv)"
                );
                return;
            }
        }
    };
}
pub(crate) use require_icefloe;

/// A fresh folder, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("icefloe-feed-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `icefloe serve` on a warehouse. The first start picks a free port (`--port 0`); a
/// restart uses the same port, so clients can reconnect to the same URI.
pub struct Server {
    bin: PathBuf,
    pub warehouse: PathBuf,
    args: Vec<String>,
    port: u16,
    pub uri: String,
    child: Option<Child>,
    log: Arc<Mutex<String>>,
}

impl Server {
    pub fn start(bin: &Path, warehouse: &Path, args: &[&str]) -> Server {
        let mut server = Server {
            bin: bin.to_path_buf(),
            warehouse: warehouse.to_path_buf(),
            args: args.iter().map(|a| a.to_string()).collect(),
            port: 0,
            uri: String::new(),
            child: None,
            log: Arc::default(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut child = Command::new(&self.bin)
            .args([
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--warehouse",
            ])
            .arg(&self.warehouse)
            .args(&self.args)
            .env(
                "ICEFLOE_LOG_LEVEL",
                std::env::var("ICEFLOE_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start icefloe serve");
        let stderr = child.stderr.take().expect("stderr");
        let (ready_tx, ready_rx) = mpsc::channel();
        let log = Arc::clone(&self.log);
        // Keep draining the log so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if let Some(at) = line.find("icefloe listening on ") {
                    let _ = ready_tx.send(line[at + "icefloe listening on ".len()..].trim().to_string());
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        self.child = Some(child);
        match ready_rx.recv_timeout(Duration::from_secs(90)) {
            Ok(uri) => {
                self.port = uri
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("port in the readiness line");
                self.uri = uri;
            }
            Err(_) => panic!("icefloe serve did not start; log:\n{}", self.log()),
        }
    }

    /// Everything the server logged so far (across restarts).
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGKILL: no clean shutdown at all.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for the clean shutdown.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(60);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same warehouse, port and flags.
    pub fn restart(&mut self) {
        self.kill9();
        // The port was ours a moment ago; if the kernel still holds it, try again shortly.
        for attempt in 0.. {
            let port = self.port;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.spawn()));
            match result {
                Ok(()) if self.port == port => return,
                Ok(()) => panic!("server came back on port {} instead of {port}", self.port),
                Err(_) if attempt < 5 => std::thread::sleep(Duration::from_millis(500)),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    }

    /// Run Python in the server's virtualenv (for offline catalog work such as a log trim).
    pub fn python(&self, code: &str) -> String {
        python(&self.bin, code)
    }

    /// Restart (same warehouse and port) with these flags instead of the first ones.
    pub fn restart_with(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self.restart();
    }
}

/// Run Python in the virtualenv of the `icefloe` executable `bin` (offline catalog work
/// before a server starts); returns its stripped stdout.
pub fn python(bin: &Path, code: &str) -> String {
    let python = bin.with_file_name("python");
    let out = Command::new(python).args(["-c", code]).output().expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Create `table` (`ns.t`: columns `id BIGINT, v VARCHAR`) in a new warehouse with the
/// Python catalog, offline, and append one commit per entry of `appends`; then run `then`
/// (Python with the catalog as `cat`, e.g. a log trim) and return what it printed.
pub fn offline_appends(bin: &Path, warehouse: &Path, table: &str, appends: &[&[i64]], then: &str) -> String {
    let (namespace, _) = table.rsplit_once('.').expect("ns.t");
    python(
        bin,
        &format!(
            r#"
import pyarrow as pa
from catalog import RocksCatalog
cat = RocksCatalog("icefloe", warehouse={warehouse:?})
cat.create_namespace({namespace:?})
cat.create_table({table:?}, pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())]))
for ids in {appends:?}:
    cat.load_table({table:?}).append(pa.table({{"id": pa.array(ids, pa.int64()), "v": ["x"] * len(ids)}}))
{then}
cat.close()
"#,
            warehouse = warehouse.display().to_string(),
        ),
    )
}

/// Commits through the server's Flight endpoint: DoPut appends and SQL statements.
pub struct Writer {
    client: FlightClient,
}

impl Writer {
    pub async fn connect(uri: &str) -> Writer {
        Writer::connect_with(uri, None, None).await
    }

    /// `None` while the server is not reachable.
    pub async fn try_connect(uri: &str) -> Option<Writer> {
        let channel = Endpoint::from_shared(uri.replace("grpc://", "http://"))
            .unwrap()
            .connect()
            .await
            .ok()?;
        Some(Writer {
            client: FlightClient::new(channel),
        })
    }

    pub async fn connect_with(uri: &str, token: Option<&str>, ca_pem: Option<&[u8]>) -> Writer {
        let target = uri.replace("grpc+tls://", "https://").replace("grpc://", "http://");
        let mut endpoint = Endpoint::from_shared(target).unwrap();
        if let Some(ca) = ca_pem {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)))
                .unwrap();
        }
        let channel = endpoint.connect().await.expect("writer connects");
        let mut client = FlightClient::new(channel);
        if let Some(token) = token {
            client.add_header("authorization", &format!("Bearer {token}")).unwrap();
        }
        Writer { client }
    }

    /// One SQL statement, sent as a Flight SQL `CommandStatementQuery`: a write runs at
    /// `GetFlightInfo` and commits once.
    pub async fn try_sql(&mut self, statement: &str) -> Result<(), tonic::Status> {
        let command = any(
            "type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery",
            &field(1, statement.as_bytes()),
        );
        match self.client.get_flight_info(FlightDescriptor::new_cmd(command)).await {
            Ok(_) => Ok(()),
            Err(arrow_flight::error::FlightError::Tonic(status)) => Err(*status),
            Err(e) => Err(tonic::Status::internal(e.to_string())),
        }
    }

    pub async fn sql(&mut self, statement: &str) {
        if let Err(status) = self.try_sql(statement).await {
            panic!("{statement}: {status}");
        }
    }

    /// Append `ids` (columns `id BIGINT, v VARCHAR`) with DoPut; returns the commit seq.
    pub async fn try_append(&mut self, table: &str, ids: std::ops::Range<i64>) -> Result<i64, tonic::Status> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(StringArray::from_iter_values(ids.map(|i| format!("v{i}")))),
            ],
        )
        .unwrap();
        let path = table.split('.').map(String::from).collect();
        let data = FlightDataEncoderBuilder::new()
            .with_flight_descriptor(Some(FlightDescriptor::new_path(path)))
            .build(futures::stream::iter([Ok(batch)]));
        let results = match self.client.do_put(data).await {
            Ok(stream) => stream.try_collect::<Vec<_>>().await,
            Err(e) => Err(e),
        };
        let results = results.map_err(|e| match e {
            arrow_flight::error::FlightError::Tonic(status) => *status,
            other => tonic::Status::internal(other.to_string()),
        })?;
        let answer: serde_json::Value = serde_json::from_slice(&results[0].app_metadata).unwrap();
        Ok(answer["commit_seq"].as_i64().expect("commit_seq"))
    }

    pub async fn append(&mut self, table: &str, ids: std::ops::Range<i64>) -> i64 {
        self.try_append(table, ids)
            .await
            .unwrap_or_else(|status| panic!("append to {table}: {status}"))
    }
}

/// A protobuf length-delimited field.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(number << 3) | 2];
    let mut len = bytes.len();
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(bytes);
    out
}

/// `google.protobuf.Any { type_url, value }`.
fn any(type_url: &str, value: &[u8]) -> Vec<u8> {
    let mut out = field(1, type_url.as_bytes());
    out.extend(field(2, value));
    out
}

/// Read events from `stream` until one with `seq >= last` arrived (or the timeout).
pub async fn events_until<S>(stream: &mut S, last: i64, timeout: Duration) -> Vec<CommitEvent>
where
    S: Stream<Item = FeedResult<CommitEvent>> + Unpin,
{
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while out.last().is_none_or(|e: &CommitEvent| e.seq < last) {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(event))) => out.push(event),
            Ok(Some(Err(e))) => panic!("feed error after {:?}: {e}", seqs(&out)),
            Ok(None) => panic!("feed ended after {:?}", seqs(&out)),
            Err(_) => panic!("timed out waiting for seq {last}; got {:?}", seqs(&out)),
        }
    }
    out
}

pub fn seqs(events: &[CommitEvent]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

/// Write a file (for users files and certificates).
pub fn write(path: &Path, contents: &[u8]) {
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(contents).unwrap();
}

/// `icefloe passwd`: the Argon2id hash of `password`.
pub fn password_hash(bin: &Path, password: &str) -> String {
    let mut child = Command::new(bin)
        .arg("passwd")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("icefloe passwd");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "icefloe passwd: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
