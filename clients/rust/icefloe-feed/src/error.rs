//! Errors of the feed client, and how a server status is classified.

use std::fmt;

use tonic::Code;

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong talking to an icefloe server.
///
/// Retryable trouble (the server restarting, a dropped connection, a stalled stream) never
/// shows up here: the streams reconnect by themselves. What does show up is what retrying
/// the same request cannot fix.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The cursor is older than the server's retained commit log ("cursor expired"). The
    /// events between the cursor and `log_start` are gone; resubscribing from
    /// [`Cursor::Earliest`](crate::Cursor::Earliest) skips them knowingly.
    ///
    /// A [change scan](crate::Client::changes) fails with it too: when `after` is older than
    /// the log (then `log_start` is set), or when the data files of a commit in the range
    /// were compacted and then expired (then `log_start` is `None` and the message names the
    /// commit to scan from).
    CursorExpired {
        /// The oldest seq the server still has, when the message names it.
        log_start: Option<i64>,
        /// The server's message.
        message: String,
    },
    /// A `rows.v1` stream ended because the table's schema changed: resubscribe with
    /// `after = resume_after` to read the rows that follow with the new schema.
    SchemaChanged {
        /// The seq to pass as `after` to the next [`Client::rows`](crate::Client::rows).
        resume_after: i64,
        /// The server's message.
        message: String,
    },
    /// The server refused the call for good: a malformed subscription, an unknown table,
    /// bad credentials (`Unauthenticated`), a role too low (`PermissionDenied`), ...
    ///
    /// pyarrow's Flight server sends some codes as `InvalidArgument` with the intended code
    /// as a prefix of the message; [`Error::code`] reads that prefix.
    Status(tonic::Status),
    /// The connection could not be set up (bad URI, TLS configuration, unreachable server
    /// at [`Client::connect`](crate::Client::connect)).
    Transport(tonic::transport::Error),
    /// The server sent something this client does not understand.
    Protocol(String),
    /// An Arrow batch could not be decoded.
    Arrow(arrow_schema::ArrowError),
    /// An option given to the client is not usable (for example an unknown URI scheme).
    Config(String),
}

impl Error {
    /// The gRPC code the server meant, reading pyarrow's `"CODE_NAME: ..."` message prefix
    /// (see the server's README, *Errors and status codes*); `None` for non-status errors.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Status(status) => Some(intended_code(status)),
            Error::CursorExpired { .. } => Some(Code::OutOfRange),
            Error::SchemaChanged { .. } => Some(Code::FailedPrecondition),
            _ => None,
        }
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Error::Protocol(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::CursorExpired { message, .. } | Error::SchemaChanged { message, .. } => f.write_str(message),
            Error::Status(status) => write!(f, "{:?}: {}", status.code(), status.message()),
            Error::Transport(e) => write!(f, "transport error: {e}"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
            Error::Arrow(e) => write!(f, "arrow error: {e}"),
            Error::Config(m) => write!(f, "invalid client option: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Status(s) => Some(s),
            Error::Transport(e) => Some(e),
            Error::Arrow(e) => Some(e),
            _ => None,
        }
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(e: arrow_schema::ArrowError) -> Self {
        Error::Arrow(e)
    }
}

impl From<tonic::transport::Error> for Error {
    fn from(e: tonic::transport::Error) -> Self {
        Error::Transport(e)
    }
}

/// The code the server meant: pyarrow cannot send `OUT_OF_RANGE`, `FAILED_PRECONDITION`,
/// `ABORTED`, ... so it sends another code with the intended name as the message prefix.
fn intended_code(status: &tonic::Status) -> Code {
    let message = status.message();
    let prefix = message.split(':').next().unwrap_or("");
    match prefix {
        "OUT_OF_RANGE" => Code::OutOfRange,
        "FAILED_PRECONDITION" => Code::FailedPrecondition,
        "ALREADY_EXISTS" => Code::AlreadyExists,
        "ABORTED" => Code::Aborted,
        "RESOURCE_EXHAUSTED" => Code::ResourceExhausted,
        _ => status.code(),
    }
}

/// What a feed stream does with a failed call.
pub(crate) enum Disposition {
    /// Reconnect (after a backoff) and resume from the cursor.
    Retry,
    /// Reconnect after logging in again (a bearer token expired or was revoked).
    Relogin,
    /// End the stream with this error.
    Fail(Error),
}

/// Sort a status from a feed call into retry / re-login / fail.
///
/// Mirrors the Python client (`flight_server.cli.client`): everything is retried except what
/// the same request can never get past. A connection lost mid-stream reaches tonic as
/// `Unavailable`, `Unknown`, `Internal` ("h2 protocol error") or `Cancelled`, so those retry.
pub(crate) fn classify(status: tonic::Status, can_relogin: bool) -> Disposition {
    let message = status.message();
    if let Some(expired) = cursor_expired(message) {
        return Disposition::Fail(expired);
    }
    let code = intended_code(&status);
    if code == Code::FailedPrecondition
        && let Some(resume_after) = number_after(message, "resubscribe with after=")
    {
        return Disposition::Fail(Error::SchemaChanged {
            resume_after,
            message: clean(message),
        });
    }
    match code {
        Code::Unauthenticated if can_relogin => Disposition::Relogin,
        Code::InvalidArgument
        | Code::NotFound
        | Code::Unimplemented
        | Code::Unauthenticated
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::AlreadyExists => Disposition::Fail(Error::Status(status)),
        _ => Disposition::Retry,
    }
}

/// The error for a call that is not retried (a change scan's `GetFlightInfo` / `DoGet`):
/// "cursor expired" is [`Error::CursorExpired`], anything else [`Error::Status`].
pub(crate) fn status_error(status: tonic::Status) -> Error {
    cursor_expired(status.message()).unwrap_or(Error::Status(status))
}

/// [`Error::CursorExpired`] when the server's message says so (the feed's expired cursor,
/// or a change scan whose range the log or the table's files no longer reach).
fn cursor_expired(message: &str) -> Option<Error> {
    message.contains("cursor expired").then(|| Error::CursorExpired {
        log_start: number_after(message, "log starts at "),
        message: clean(message),
    })
}

/// The message without the `OUT_OF_RANGE: ` style prefix and pyarrow's `. Detail:` tail.
fn clean(message: &str) -> String {
    let text = message.split(". Detail:").next().unwrap_or(message);
    let text = text.split(". gRPC client debug context").next().unwrap_or(text);
    match text.split_once(": ") {
        Some((prefix, rest)) if prefix.chars().all(|c| c.is_ascii_uppercase() || c == '_') => rest.to_string(),
        _ => text.to_string(),
    }
}

/// The integer right after `marker` in `text`, if any.
pub(crate) fn number_after(text: &str, marker: &str) -> Option<i64> {
    let start = text.find(marker)? + marker.len();
    let digits: String = text[start..].chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_expired_is_its_own_variant() {
        let status = tonic::Status::invalid_argument("OUT_OF_RANGE: cursor expired: log starts at 12");
        match classify(status, false) {
            Disposition::Fail(Error::CursorExpired { log_start, message }) => {
                assert_eq!(log_start, Some(12));
                assert_eq!(message, "cursor expired: log starts at 12");
            }
            _ => panic!("not CursorExpired"),
        }
    }

    #[test]
    fn schema_change_names_the_seq_to_resume_after() {
        let status = tonic::Status::invalid_argument(
            "FAILED_PRECONDITION: the schema of ns.t changed at seq 7; resubscribe with after=7 to read rows",
        );
        match classify(status, false) {
            Disposition::Fail(Error::SchemaChanged { resume_after, .. }) => assert_eq!(resume_after, 7),
            _ => panic!("not SchemaChanged"),
        }
    }

    #[test]
    fn unavailable_retries_and_bad_requests_fail() {
        assert!(matches!(
            classify(tonic::Status::unavailable("shutting down"), false),
            Disposition::Retry
        ));
        assert!(matches!(
            classify(tonic::Status::unknown("h2 error"), false),
            Disposition::Retry
        ));
        assert!(matches!(
            classify(tonic::Status::invalid_argument("bad"), false),
            Disposition::Fail(_)
        ));
        assert!(matches!(
            classify(tonic::Status::unauthenticated("expired"), true),
            Disposition::Relogin
        ));
        assert!(matches!(
            classify(tonic::Status::unauthenticated("no"), false),
            Disposition::Fail(_)
        ));
    }
}
