//! [`Client`]: one gRPC channel to an icefloe server, with TLS and login.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use arrow_flight::HandshakeRequest;
use arrow_flight::flight_service_client::FlightServiceClient;
use base64::Engine;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::changes::{ChangeScan, ChangeStream};
use crate::error::{Error, Result};
use crate::rows::RowStream;
use crate::subscription::{CommitStream, Cursor, Subscription};

/// How the client proves who it is to a server started with `--users`.
#[derive(Clone)]
pub enum Credentials {
    /// Log in with user name and password (Basic on `Handshake`); the server answers a
    /// bearer token that later calls send. With these, the client also logs in again by
    /// itself when its token has expired or was revoked.
    Basic {
        /// User name from the server's users file.
        user: String,
        /// The user's password.
        password: String,
    },
    /// A bearer token obtained elsewhere (`icefloe login`).
    Token(String),
}

impl std::fmt::Debug for Credentials {
    // Never print a password or a token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Basic { user, .. } => f.debug_struct("Basic").field("user", user).finish_non_exhaustive(),
            Credentials::Token(_) => f.write_str("Token(..)"),
        }
    }
}

/// TLS settings for `grpc+tls://` URIs.
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// PEM certificates of the CAs that may sign the server's certificate. Without them
    /// (and without the `native-roots` feature) a `grpc+tls://` server cannot be verified.
    pub root_certs_pem: Option<Vec<u8>>,
    /// PEM certificate chain and private key presented to a server started with
    /// `--tls-client-ca` (mutual TLS).
    pub client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify the server's certificate against, when it is not the URI's host.
    pub domain_name: Option<String>,
}

impl std::fmt::Debug for TlsOptions {
    // Never print the client's private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field(
                "root_certs_pem",
                &self.root_certs_pem.as_ref().map(|pem| format!("{} bytes", pem.len())),
            )
            .field("client_identity_pem", &self.client_identity_pem.as_ref().map(|_| ".."))
            .field("domain_name", &self.domain_name)
            .finish()
    }
}

/// Options of [`Client::connect`].
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Login; `None` for a server without `--users`.
    pub credentials: Option<Credentials>,
    /// Used when the URI is `grpc+tls://`.
    pub tls: TlsOptions,
    /// Longest wait for a TCP (and TLS) connection to be set up.
    pub connect_timeout: Duration,
    /// Longest pause between two reconnection attempts of a feed stream (the pause starts
    /// at 100 ms and doubles).
    pub max_backoff: Duration,
    /// HTTP/2 flow-control window, per stream and for the connection: how far the server
    /// may send ahead of a consumer that stopped polling. `None` keeps tonic's default
    /// (some MiB); a small window makes a sleeping consumer hold little memory and lets
    /// the server move its stream to the durable-log path sooner.
    pub flow_control_window: Option<u32>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            credentials: None,
            tls: TlsOptions::default(),
            connect_timeout: Duration::from_secs(10),
            max_backoff: Duration::from_secs(5),
            flow_control_window: None,
        }
    }
}

impl ClientOptions {
    /// Log in with user name and password.
    pub fn with_basic(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials::Basic {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Send this bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.credentials = Some(Credentials::Token(token.into()));
        self
    }

    /// Trust these PEM CA certificates for the server's certificate.
    pub fn with_root_certs_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_certs_pem = Some(pem.into());
        self
    }

    /// Present this PEM certificate chain and key to the server (mutual TLS).
    pub fn with_client_identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.tls.client_identity_pem = Some((cert.into(), key.into()));
        self
    }
}

/// The bearer token in use; shared by the interceptor and by every response that may
/// carry a renewed one.
#[derive(Default)]
struct TokenCell(RwLock<Option<AsciiMetadataValue>>);

impl TokenCell {
    fn get(&self) -> Option<AsciiMetadataValue> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, value: AsciiMetadataValue) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }
}

/// Adds `authorization: Bearer ...` to every call once a token is known.
#[derive(Clone)]
pub(crate) struct BearerInterceptor(Arc<TokenCell>);

impl Interceptor for BearerInterceptor {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        // A call that brings its own authorization (the Basic login) keeps it.
        if !request.metadata().contains_key("authorization")
            && let Some(value) = self.0.get()
        {
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }
}

/// The generated Flight service client this crate calls through.
pub(crate) type Service = FlightServiceClient<InterceptedService<Channel, BearerInterceptor>>;

/// A connection to an icefloe server's Flight endpoint.
///
/// Cheap to clone: clones share one gRPC channel (HTTP/2 multiplexes every stream over one
/// connection) and one bearer token. The channel reconnects by itself after the server
/// restarts; the streams it hands out resume where they were.
#[derive(Clone)]
pub struct Client {
    service: Service,
    token: Arc<TokenCell>,
    credentials: Option<Credentials>,
    options: ClientOptions,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connect to `uri` (`grpc://HOST:PORT`, `grpc+tcp://...` or `grpc+tls://...`) and,
    /// with [`Credentials::Basic`], log in.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an unusable URI or TLS option, [`Error::Transport`] when the
    /// server cannot be reached, [`Error::Status`] (`Unauthenticated`) for a bad password.
    pub async fn connect(uri: impl AsRef<str>, options: ClientOptions) -> Result<Client> {
        let endpoint = endpoint(uri.as_ref(), &options)?;
        let channel = endpoint.connect().await?;
        let token = Arc::new(TokenCell::default());
        let service = FlightServiceClient::with_interceptor(channel, BearerInterceptor(Arc::clone(&token)))
            // Arrow Flight lifts gRPC's 4 MiB limit; a rows.v1 batch can be larger.
            .max_decoding_message_size(usize::MAX);
        let client = Client {
            service,
            token,
            credentials: options.credentials.clone(),
            options,
        };
        match &client.credentials {
            Some(Credentials::Token(token)) => client.token.set(bearer(token)?),
            Some(Credentials::Basic { .. }) => client.login().await?,
            None => {}
        }
        Ok(client)
    }

    /// Log in again with the [`Credentials::Basic`] this client was made with (streams do
    /// this by themselves when the server says their token expired).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] without Basic credentials; [`Error::Status`] `Unauthenticated`
    /// for a wrong user name or password.
    pub async fn login(&self) -> Result<()> {
        let Some(Credentials::Basic { user, password }) = &self.credentials else {
            return Err(Error::Config("login needs Credentials::Basic".into()));
        };
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut request = tonic::Request::new(futures::stream::iter([HandshakeRequest::default()]));
        let value = AsciiMetadataValue::try_from(format!("Basic {basic}"))
            .map_err(|_| Error::Config("user name or password cannot be sent in a header".into()))?;
        request.metadata_mut().insert("authorization", value);
        // The interceptor leaves an authorization header that is already there alone, so an
        // old bearer token does not replace the Basic credentials.
        let response = self.service().handshake(request).await.map_err(Error::Status)?;
        if !self.note_headers(response.metadata()) {
            return Err(Error::protocol("the server answered the login without a bearer token"));
        }
        // Drain the (empty) handshake answer so the call ends cleanly.
        let mut stream = response.into_inner();
        while stream.message().await.map_err(Error::Status)?.is_some() {}
        Ok(())
    }

    /// The bearer token in use (after a login, or the latest renewal the server sent).
    pub fn token(&self) -> Option<String> {
        let value = self.token.get()?;
        let text = value.to_str().ok()?;
        Some(text.strip_prefix("Bearer ").unwrap_or(text).to_string())
    }

    /// Follow the commit feed (`commits.v1`): every matching commit after
    /// `subscription.after`, then live. See [`CommitStream`].
    ///
    /// Returns once the server has accepted the subscription, so [`Cursor::Latest`] means
    /// "after the commits that landed before this returned".
    ///
    /// # Errors
    ///
    /// What retrying cannot fix: [`Error::CursorExpired`], or [`Error::Status`] for a
    /// malformed subscription or refused credentials. An unreachable server is retried.
    pub async fn subscribe(&self, subscription: Subscription) -> Result<CommitStream> {
        CommitStream::start(self.clone(), subscription).await
    }

    /// Follow the rows appended to one table (`rows.v1`): see [`RowStream`].
    ///
    /// `table` is `namespace.table` (no glob). Returns once the server has accepted the
    /// subscription.
    ///
    /// # Errors
    ///
    /// As [`Client::subscribe`]; an unknown table is [`Error::Status`] (`NotFound`).
    pub async fn rows(&self, table: impl Into<String>, after: Cursor) -> Result<RowStream> {
        RowStream::start(self.clone(), table.into(), after).await
    }

    /// Read the changes of one table by the commits with seq in `(scan.after, scan.until]`
    /// (a change scan): see [`ChangeScan`] and [`ChangeStream`].
    ///
    /// Returns once the server has planned the scan (`GetFlightInfo`), with its schema and
    /// [`non_appends`](ChangeStream::non_appends); the stream then reads the endpoints with
    /// up to [`ChangeScan::parallelism`] `DoGet` calls at once, from this server or, when an
    /// endpoint names locations, from the first of them that answers (connected with this
    /// client's TLS options and its bearer token). Unlike the feeds, a change scan is not
    /// retried: it fails with the first error.
    ///
    /// # Errors
    ///
    /// [`Error::CursorExpired`] when the server no longer keeps the range (its commit log
    /// was trimmed past `after`, or compaction and snapshot expiry removed the files of a
    /// commit in it; the stream can also end with it if files go while it reads);
    /// [`Error::Status`] with `InvalidArgument` for a malformed range (reversed, negative,
    /// `until` beyond the commit head, a bad table name) and `NotFound` for an unknown
    /// table; refused credentials as for [`Client::subscribe`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// use arrow_array::cast::AsArray;
    /// use arrow_array::types::Int64Type;
    /// use futures::StreamExt;
    /// use icefloe_feed::{ChangeScan, Client, ClientOptions, Include};
    ///
    /// # async fn run() -> icefloe_feed::Result<()> {
    /// let client = Client::connect("grpc://127.0.0.1:31337", ClientOptions::default()).await?;
    /// let mut changes = client
    ///     .changes(ChangeScan { include: Include::Appends, max_partitions: Some(8), ..ChangeScan::new("sales.orders", 100, 250) })
    ///     .await?;
    /// if changes.non_appends().iter().any(|c| c.data_change) {
    ///     println!("some commits in the range changed rows in place: re-read the table");
    /// }
    /// // Batches of different endpoints arrive in no particular order.
    /// while let Some(batch) = changes.next().await {
    ///     let batch = batch?;
    ///     let seqs = batch.column_by_name("_seq").expect("_seq").as_primitive::<Int64Type>();
    ///     println!("{} rows of seq {}..={}", batch.num_rows(), seqs.value(0), seqs.value(seqs.len() - 1));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn changes(&self, scan: ChangeScan) -> Result<ChangeStream> {
        ChangeStream::start(self.clone(), scan).await
    }

    /// A client for another server of the same fleet (an endpoint's location): this
    /// client's options, with its current bearer token when it has one (no second login).
    pub(crate) async fn connect_like(&self, uri: &str) -> Result<Client> {
        let mut options = self.options.clone();
        if let Some(token) = self.token() {
            options.credentials = Some(Credentials::Token(token));
        }
        Client::connect(uri, options).await
    }

    pub(crate) fn service(&self) -> Service {
        self.service.clone()
    }

    pub(crate) fn can_relogin(&self) -> bool {
        matches!(self.credentials, Some(Credentials::Basic { .. }))
    }

    pub(crate) fn max_backoff(&self) -> Duration {
        self.options.max_backoff
    }

    /// Pick up `authorization: Bearer ...` from a response (a login, or a renewal of a
    /// token past half its lifetime); returns whether there was one.
    pub(crate) fn note_headers(&self, headers: &MetadataMap) -> bool {
        match headers.get("authorization") {
            Some(value) if value.to_str().is_ok_and(|v| v.starts_with("Bearer ")) => {
                self.token.set(value.clone());
                true
            }
            _ => false,
        }
    }
}

fn bearer(token: &str) -> Result<AsciiMetadataValue> {
    AsciiMetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| Error::Config("the token is not valid header text".into()))
}

/// A tonic endpoint for a Flight URI.
fn endpoint(uri: &str, options: &ClientOptions) -> Result<Endpoint> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| Error::Config(format!("{uri:?} is not a URI")))?;
    let tls = match scheme {
        "grpc" | "grpc+tcp" | "http" => false,
        "grpc+tls" | "https" => true,
        other => {
            return Err(Error::Config(format!(
                "unsupported URI scheme {other:?} (use grpc:// or grpc+tls://)"
            )));
        }
    };
    let target = format!("{}://{rest}", if tls { "https" } else { "http" });
    let mut endpoint = Endpoint::from_shared(target)
        .map_err(|e| Error::Config(format!("bad URI {uri:?}: {e}")))?
        .connect_timeout(options.connect_timeout)
        // Latency matters more than packet count: events are small.
        .tcp_nodelay(true)
        // Find a dead peer on an idle feed even when heartbeats are rare.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if let Some(window) = options.flow_control_window {
        endpoint = endpoint
            .initial_stream_window_size(window)
            .initial_connection_window_size(window);
    }
    if tls {
        endpoint = endpoint.tls_config(tls_config(&options.tls))?;
    }
    Ok(endpoint)
}

fn tls_config(options: &TlsOptions) -> ClientTlsConfig {
    let mut config = ClientTlsConfig::new();
    if let Some(pem) = &options.root_certs_pem {
        config = config.ca_certificate(Certificate::from_pem(pem));
    } else {
        #[cfg(feature = "native-roots")]
        {
            config = config.with_native_roots();
        }
    }
    if let Some((cert, key)) = &options.client_identity_pem {
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = &options.domain_name {
        config = config.domain_name(name.clone());
    }
    config
}
