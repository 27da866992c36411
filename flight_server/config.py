"""Server configuration, kept apart from the server that uses it (as uvicorn does)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class Config:
    warehouse: str = "./warehouse"
    # An s3:// warehouse: where the RocksDB catalog of record lives (local disk), and how to
    # reach the bucket (catalog.object_store.S3Settings; keys from the AWS variables or a file).
    catalog_path: str | None = None
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_path_style: bool = False
    s3_credentials_file: str | None = None
    host: str = "127.0.0.1"
    port: int = 31337
    users_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    lineage_namespace: str | None = None
    lineage_hash_names: bool = False
    demo: bool = False
    log_level: str = "info"
    # "text" or "json" (one object per line, query-log fields included).
    log_format: str = "text"
    # Statements at least this slow are logged at WARNING in the query log (None: never).
    slow_query_ms: float | None = 1000.0
    query_timeout_s: float = 300.0
    # A Flight SQL transaction idle this long is ended (nothing of it commits); a later use of
    # its id is FAILED_PRECONDITION naming the expiry.
    transaction_timeout_s: float = 300.0
    max_concurrent_queries: int = 16
    # DuckDB memory per running query (e.g. "2GB"); beyond it sorts and joins spill to a private
    # folder. None: DuckDB's default (80% of RAM).
    memory_limit: str | None = None
    # URIs the endpoints of split scans name (every server of a fleet over one warehouse can
    # run any ticket); none: endpoints name no location, meaning "this server".
    advertise_uris: tuple[str, ...] = ()
    # Processes that run query tickets (DoGet) beside this one (flight_server.workers): reads'
    # DuckDB work and Arrow streaming leave this process's GIL; 0 = every read runs here.
    read_workers: int = 0
    # HTTP side, off unless asked for (None): the Iceberg REST catalog (0 = a free port) and
    # the operator endpoints (metrics, health, watch page; also on the REST port when it is on).
    rest_port: int | None = None
    metrics_port: int | None = None
    # A TOML file of ingest connectors ([connectors.NAME]) run inside the server (flight_server.ingest).
    ingest_config: str | None = None
    # Host names the HTTP ports answer to beyond their own (flight_server.http.request_checks):
    # "name" (any port), "name:port", "*.domain", or "*" (no check).
    http_allowed_hosts: tuple[str, ...] = ()
    # Connections the HTTP ports hold at once, in all and per client IP; both are lowered to a
    # quarter of RLIMIT_NOFILE so Flight and RocksDB keep their descriptors (http.limits).
    http_max_connections: int = 1024
    http_max_connections_per_ip: int = 64
    # A request's headers must be complete this long after its first byte (slowloris); an
    # idle keep-alive connection is closed after http_keepalive_timeout_s.
    http_header_timeout_s: float = 10.0
    http_keepalive_timeout_s: float = 5.0
    # Watch-page event streams (/api/events): in all, and per user (per client IP without --users).
    http_max_event_streams: int = 100
    http_max_event_streams_per_user: int = 16
    max_subscribers: int = 1000
    allow_remote_without_auth: bool = False
    # Lifetime of bearer tokens issued at login (a working day by default).
    token_ttl_s: float = 8 * 3600.0
    # Calls one user may have in flight at once (feed subscriptions count); 0 = no limit.
    max_calls_per_user: int = 64
    # How long a Python thread may hold the GIL while others wait (CPython's default is 5 ms).
    # Feed fan-out and RPC threads need the GIL briefly after every C++ write; behind a
    # CPU-bound thread (maintenance, a commit) each of those waits lasted up to the full
    # interval, so a commit reached the last of 100 subscribers tens of ms late (bench_feed).
    gil_switch_interval_s: float = 0.0002
    # Python's cyclic collector: its full passes walk every tracked object holding the GIL.
    # Of the ~163k tracked after 400 in-process appends almost all exist from startup
    # (functions, types, module dicts): they are frozen out of collection once the server is
    # up (gc.freeze), and young-generation passes are made rarer. Over 400 appends at load ~7
    # the full passes went from 4 (1.3-2 s in all, up to 0.6 s each) to 1. Cycles are still
    # collected. None leaves the interpreter alone.
    gc_thresholds: tuple[int, int, int] | None = (5_000, 20, 20)
    # Threads in pyiceberg's shared pool (manifest reads, scan planning); its default is
    # cores + 4. Python threads beyond the core count only queue for the GIL: while
    # maintenance kept all of them busy, every feed write waited behind them (bench_feed).
    # PYICEBERG_MAX_WORKERS, when set, wins.
    iceberg_max_workers: int = os.cpu_count() or 2

    @property
    def scheme(self) -> str:
        return "grpc+tls" if self.tls_cert else "grpc"

    @property
    def location(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def catalog_properties(self) -> dict[str, str]:
        """``RocksCatalog`` properties for the warehouse (see ``catalog_properties``)."""
        return catalog_properties(self.warehouse, self.catalog_path, self.s3_endpoint, self.s3_region,
                                  self.s3_path_style, self.s3_credentials_file)

    @property
    def key_folder(self) -> str:
        """Where the signing keys live: the warehouse folder, or the catalog folder of an
        object-store warehouse (shared by the servers of that catalog)."""
        return self.catalog_path if self.catalog_path and "://" in self.warehouse else self.warehouse

    @property
    def warehouse_path(self) -> str:
        return self.warehouse if "://" in self.warehouse else os.path.abspath(self.warehouse)


def catalog_properties(warehouse: str, catalog_path: str | None, s3_endpoint: str | None = None,
                       s3_region: str | None = None, s3_path_style: bool = False,
                       s3_credentials_file: str | None = None) -> dict[str, str]:
    """``RocksCatalog`` properties for a warehouse: its catalog folder, and the FileIO settings
    of an object-store one (``serve`` and offline ``maintain`` alike).

    Raises:
        catalog.object_store.StorageConfigError: Bad or missing object-store settings.
    """
    from catalog.object_store import S3Settings, StorageConfigError, is_object_store

    props = {"warehouse": warehouse}
    if catalog_path:
        props["catalog-path"] = os.path.abspath(catalog_path)
    if not is_object_store(warehouse):
        if s3_endpoint or s3_credentials_file:
            raise StorageConfigError("--s3-* settings need an s3:// --warehouse")
        return props
    if not catalog_path:
        raise StorageConfigError("an s3:// --warehouse needs --catalog-path (a local folder for the catalog)")
    settings = S3Settings.resolve(s3_endpoint, s3_region, s3_path_style, s3_credentials_file)
    return {**props, **settings.io_properties()}
