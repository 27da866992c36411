"""icefloe's public Python API: one lake, in-process or remote, as Arrow sources and sinks.

    import icefloe

    lake = icefloe.open("./warehouse")                # in-process (read-only beside a server)
    lake = icefloe.connect("grpc://127.0.0.1:31337")  # or remote, the same API
    t = lake.table("sales.orders")
    df = polars.from_arrow(t.scan(columns=["id", "v"], filter="v > 10"))
    event = t.append(arrow_table)
    icefloe.pipe(source=t, transform=fn, sink=lake.table("sales.daily"), checkpoint="daily-job")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flight_server.cli.client import CommitEvent
from icefloe.backend import AppendEvent, Backend, ScanSource
from icefloe.errors import (
    AlreadyExists,
    CheckpointLost,
    Conflict,
    CursorExpired,
    Error,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ReadOnly,
    Unauthenticated,
    Unavailable,
)
from icefloe.lake import Lake, Scan, Table

if TYPE_CHECKING:
    from icefloe.pipes import PipeStats, checkpoint_of, pipe

# Imported on first use: pipes need the catalog's checkpoint rules (and pyiceberg with them),
# which a thin client that only reads and appends must not load (``icefloe.connect`` stays as
# light as ``pyarrow.flight``; see benchmarks/bench_embedded.py, the thin-client row).
_LAZY = {"pipe", "PipeStats", "checkpoint_of"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # (the module is icefloe.pipes: a submodule named "pipe" would shadow the function
        # icefloe.pipe once anything imported it)
        from icefloe import pipes

        value = getattr(pipes, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def connect(uri: str, token: str | None = None, user: str | None = None, password: str | None = None,
            tls_root_certs: bytes | str | Path | None = None) -> Lake:
    """A lake served by an icefloe server.

    Args:
        uri: ``grpc://HOST:PORT`` or ``grpc+tls://HOST:PORT``.
        token: A bearer token (``icefloe login``).
        user: Log in as this user (with ``password``) instead of a token.
        password: The user's password.
        tls_root_certs: PEM bytes, or a PEM file, of the CA that signed the server's certificate.

    Returns:
        A ``Lake`` over Flight.

    Raises:
        InvalidArgument: A malformed URI, or both a token and a user.
        Unauthenticated: The login was refused.
    """
    from icefloe.remote import RemoteBackend

    return Lake(RemoteBackend(uri, token=token, user=user, password=password, tls_root_certs=tls_root_certs))


def open(  # noqa: A001 - the API's name
    warehouse: str | Path, read_only: bool | None = None, *, catalog_path: str | Path | None = None,
    s3_endpoint: str | None = None, s3_region: str | None = None, s3_path_style: bool = False,
    s3_credentials_file: str | Path | None = None,
) -> Lake:
    """A lake in this process, over the warehouse's RocksDB catalog.

    Args:
        warehouse: The warehouse folder (or ``file://`` URI), or an ``s3://bucket/prefix``.
        read_only: None (default): read-write unless another process (a server) holds the
            warehouse, then read-only; True / False to insist.
        catalog_path: The local folder of the catalog (required for an ``s3://`` warehouse).
        s3_endpoint: URL of an S3-compatible store (default: AWS).
        s3_region: The bucket's region (default: ``AWS_REGION``).
        s3_path_style: Path-style requests instead of virtual hosts.
        s3_credentials_file: An AWS credentials file; default: ``AWS_ACCESS_KEY_ID`` /
            ``AWS_SECRET_ACCESS_KEY``.

    Returns:
        A ``Lake`` in-process.

    Raises:
        ReadOnly: ``read_only=False`` but another process holds the warehouse.
        InvalidArgument: Missing or bad object-store settings.
    """
    from icefloe.errors import from_local
    from icefloe.local import LocalBackend

    properties: dict[str, str] = {}
    if catalog_path is not None:
        properties["catalog-path"] = str(catalog_path)
    if str(warehouse).startswith(("s3://", "s3a://", "s3n://")):
        from catalog.object_store import S3Settings

        try:
            settings = S3Settings.resolve(s3_endpoint, s3_region, s3_path_style,
                                          str(s3_credentials_file) if s3_credentials_file else None)
        except ValueError as exc:
            raise from_local(exc) from None
        properties.update(settings.io_properties())
    return Lake(LocalBackend(str(warehouse), read_only=read_only, properties=properties))


__all__ = [
    "AlreadyExists",
    "AppendEvent",
    "Backend",
    "CheckpointLost",
    "CommitEvent",
    "Conflict",
    "CursorExpired",
    "Error",
    "InvalidArgument",
    "Lake",
    "NotFound",
    "PermissionDenied",
    "PipeStats",
    "ReadOnly",
    "Scan",
    "ScanSource",
    "Table",
    "Unauthenticated",
    "Unavailable",
    "checkpoint_of",
    "connect",
    "open",
    "pipe",
]
