"""Object-store (S3) settings of a warehouse, and the filesystems that read and write it.

An ``s3://bucket/prefix`` warehouse keeps its catalog of record on local disk (RocksDB at
``catalog-path``) and every table file in the bucket. The settings an S3 client needs
(endpoint, region, addressing style, credentials) come from the server's flags and the
standard AWS variables, never from a table: they become the catalog's pyiceberg FileIO
properties (``io_properties``), and every reader of table files (pyiceberg, the engine's Arrow
datasets, maintenance) builds its filesystem from those same properties (``filesystem``).

Durability: an object is durable once its PUT (or the completion of its multipart upload)
returned success. pyarrow's S3 output stream raises on ``close`` when that fails, so a commit
that writes every file before it touches the catalog lands nothing when any PUT fails. Each
request is retried a bounded number of times with exponential back-off (``BoundedRetry``).
"""

from __future__ import annotations

import configparser
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlparse

import pyarrow.fs as pafs

OBJECT_SCHEMES = ("s3", "s3a", "s3n")
# Attempts per S3 request (the first one included). AWS's standard strategy backs off
# exponentially (with jitter) between them; against a server that is down a request fails
# after a few seconds instead of hanging a commit.
MAX_ATTEMPTS = 4
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 60.0

T = TypeVar("T")


class ObjectStoreTimeout(TimeoutError):
    """An object-store read or write got no answer within its deadline (``within``)."""


def within(deadline_s: float, call: Callable[[], T], thread_name: str) -> T:
    """``call()`` on its own thread, waiting at most ``deadline_s`` for it: pyarrow's S3 client
    applies its request timeout only on Windows and macOS, so on Linux a request that is never
    answered would block its caller for good (see ``object_reads`` and ``object_writes``).

    Raises:
        ObjectStoreTimeout: No answer in time (the call goes on, unobserved).
        Exception: What ``call`` raised.
    """
    done = threading.Event()
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the waiting caller below
            failure.append(exc)
        finally:
            done.set()

    # A fresh daemon thread per call, not a pool: a call that never returns must not hold a
    # slot that later calls need.
    threading.Thread(target=run, name=thread_name, daemon=True).start()
    if not done.wait(deadline_s):
        raise ObjectStoreTimeout(f"no answer from the object store within {deadline_s:.0f} s")
    if failure:
        raise failure[0]
    return result[0]


class ObjectStoreFailed(OSError):
    """An object-store failure already turned into its client-safe message (``storage_failure``).

    Exceptions sent between processes (the maintenance worker's) lose their causes; this one
    carries what the client may be told, so the failure still maps to UNAVAILABLE there.
    """


class StorageConfigError(ValueError):
    """The object-store settings are incomplete or contradictory (a message for the operator)."""


class BoundedRetry(pafs.AwsStandardS3RetryStrategy):  # type: ignore[misc]  # pyarrow has no stubs
    """AWS's standard retry strategy with ``MAX_ATTEMPTS`` attempts.

    pyiceberg instantiates ``s3.retry-strategy-impl`` without arguments, hence the class.
    """

    def __init__(self) -> None:
        super().__init__(max_attempts=MAX_ATTEMPTS)


def is_object_store(location: str) -> bool:
    return urlparse(location).scheme in OBJECT_SCHEMES


@dataclass(frozen=True)
class S3Settings:
    """How to reach the warehouse's bucket."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    # Seconds a request may go without progress before it fails (and is retried):
    # ICEFLOE_S3_REQUEST_TIMEOUT, for stores much slower or faster than the default suits.
    request_timeout_s: float = REQUEST_TIMEOUT_S

    @classmethod
    def resolve(
        cls, endpoint: str | None = None, region: str | None = None, path_style: bool = False,
        credentials_file: str | None = None, environ: Mapping[str, str] | None = None,
    ) -> S3Settings:
        """Settings from flags, then a credentials file, then the standard AWS variables.

        ``credentials_file`` is an AWS shared-credentials file (INI; the section named by
        ``AWS_PROFILE``, else ``default``, with ``aws_access_key_id`` and
        ``aws_secret_access_key``). Without it the keys come from ``AWS_ACCESS_KEY_ID`` /
        ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``); the region from ``--s3-region``,
        else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``; the request timeout from
        ``ICEFLOE_S3_REQUEST_TIMEOUT`` (seconds; default ``REQUEST_TIMEOUT_S``).

        Raises:
            StorageConfigError: A bad endpoint, an unreadable or incomplete credentials file,
                or only one of the two keys.
        """
        env = os.environ if environ is None else environ
        if endpoint is not None:
            endpoint = endpoint.strip()
            parsed = urlparse(endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path not in ("", "/") \
                    or parsed.query or parsed.fragment:
                raise StorageConfigError(f"--s3-endpoint must be http(s)://HOST[:PORT], not {endpoint[:200]!r}")
            endpoint = endpoint.rstrip("/")
        region = region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
        key: str | None
        secret: str | None
        token: str | None
        if credentials_file:
            key, secret, token = _read_credentials_file(credentials_file, env.get("AWS_PROFILE") or "default")
        else:
            key = env.get("AWS_ACCESS_KEY_ID") or None
            secret = env.get("AWS_SECRET_ACCESS_KEY") or None
            token = env.get("AWS_SESSION_TOKEN") or None
            if (key is None) != (secret is None):
                raise StorageConfigError("set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither")
        timeout = _positive_seconds(env.get("ICEFLOE_S3_REQUEST_TIMEOUT"), "ICEFLOE_S3_REQUEST_TIMEOUT",
                                    REQUEST_TIMEOUT_S)
        return cls(endpoint, region, bool(path_style), key, secret, token, timeout)

    def io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties (PyArrowFileIO's names) for these settings."""
        props = {
            "s3.retry-strategy-impl": f"{BoundedRetry.__module__}.{BoundedRetry.__qualname__}",
            "s3.connect-timeout": str(CONNECT_TIMEOUT_S),
            "s3.request-timeout": str(self.request_timeout_s),
            # A custom endpoint serves path-style requests; virtual hosts need DNS per bucket.
            "s3.force-virtual-addressing": "false" if self.path_style or self.endpoint else "true",
        }
        if self.endpoint:
            props["s3.endpoint"] = self.endpoint
        # pyiceberg asks the bucket's region of AWS itself when none is given: never for a
        # custom endpoint (that lookup would leave the machine).
        region = self.region or ("us-east-1" if self.endpoint else None)
        if region:
            props["s3.region"] = region
        if self.access_key_id and self.secret_access_key:
            props["s3.access-key-id"] = self.access_key_id
            props["s3.secret-access-key"] = self.secret_access_key
        if self.session_token:
            props["s3.session-token"] = self.session_token
        return props


def _positive_seconds(text: str | None, name: str, default: float) -> float:
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise StorageConfigError(f"{name} must be a number of seconds in (0, 3600], not {text[:40]!r}")
    return value


def _read_credentials_file(path: str, profile: str) -> tuple[str, str, str | None]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as fh:
            parser.read_file(fh)
    except OSError as exc:
        raise StorageConfigError(f"cannot read the S3 credentials file {path}: {exc.strerror}") from None
    except configparser.Error:
        raise StorageConfigError(f"the S3 credentials file {path} is not an AWS credentials (INI) file") from None
    if not parser.has_section(profile):
        raise StorageConfigError(f"the S3 credentials file {path} has no [{profile}] section")
    section = parser[profile]
    key = section.get("aws_access_key_id", "").strip()
    secret = section.get("aws_secret_access_key", "").strip()
    if not key or not secret:
        raise StorageConfigError(
            f"the [{profile}] section of {path} needs aws_access_key_id and aws_secret_access_key"
        )
    return key, secret, section.get("aws_session_token", "").strip() or None


def filesystem(io: object, location: str) -> pafs.FileSystem:
    """The Arrow filesystem that reads ``location`` with the settings of FileIO ``io``.

    Readers that open files themselves (Arrow datasets, footers) call this instead of
    ``FileSystem.from_uri``, which would know neither the endpoint nor the keys. Paths on the
    returned filesystem are ``bucket/key`` for object stores (see ``fs_path``).
    """
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem()
    by_scheme = getattr(io, "fs_by_scheme", None)
    if by_scheme is None:
        found, _ = pafs.FileSystem.from_uri(location)
        return found
    scheme = "s3" if parsed.scheme in OBJECT_SCHEMES else parsed.scheme
    fs: pafs.FileSystem = by_scheme(scheme, parsed.netloc)
    return fs


def fs_path(location: str) -> str:
    """A location as the path its Arrow filesystem takes (``bucket/key`` on object stores)."""
    if location.startswith("file:"):
        # file:///p, file://localhost/p and Hadoop's file:/p (what Spark writes into manifests)
        parsed = urlparse(location)
        return parsed.path if parsed.netloc in ("", "localhost") else location
    if "://" in location:
        return location.split("://", 1)[1]
    return location


# pyarrow reports every S3 failure as an OSError whose text holds "AWS Error KIND ..." and the
# bucket, key and endpoint: only the kind may reach a client.
_AWS_ERROR = re.compile(r"AWS Error ([A-Z_]+|\[code \d+\])")


def storage_failure(exc: BaseException) -> str | None:
    """A client-safe message for an object-store request that failed (after its retries),
    or None when ``exc`` is not one. Wrapping errors count by their cause: the Parquet
    writer's thread fails with the S3 error, and the append re-raises it as ``WriteAborted``."""
    seen = 0
    cause: BaseException | None = exc
    match = None
    while cause is not None and seen < 8 and match is None:
        if isinstance(cause, ObjectStoreTimeout):
            return "the object store did not answer in time; nothing was committed by it, retry later"
        if isinstance(cause, ObjectStoreFailed):
            return str(cause)
        if isinstance(cause, OSError):
            match = _AWS_ERROR.search(str(cause))
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    if match is None:
        return None
    return f"the object store failed a request ({match.group(1)}); nothing was committed by it, retry later"


# What an engine needs to reach the bucket, as Iceberg's property names (pyiceberg reads the
# s3.* ones, Iceberg-Java's S3FileIO reads s3.* and client.region). The server's own tuning
# (retry strategy class, timeouts) stays out: an engine in another language cannot load it.
_CLIENT_KEYS = ("s3.endpoint", "s3.region", "s3.access-key-id", "s3.secret-access-key", "s3.session-token",
                "s3.force-virtual-addressing")


def client_config(io_properties: Mapping[str, str], warehouse: str) -> dict[str, str]:
    """The storage settings (and static credentials) the REST catalog hands engines for the
    tables of ``warehouse``: empty for a local warehouse."""
    if not is_object_store(warehouse):
        return {}
    config = {key: io_properties[key] for key in _CLIENT_KEYS if io_properties.get(key)}
    if "s3.force-virtual-addressing" in config:
        config["s3.path-style-access"] = "false" if config["s3.force-virtual-addressing"] == "true" else "true"
    if "s3.region" in config:
        config["client.region"] = config["s3.region"]
    return config
