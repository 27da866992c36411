"""The HTTP JSON connector: a paged JSON API, followed by a cursor field or Link headers.

Each page is one envelope. The position after a page is where to ask next, as JSON
``{"url": URL, "skip": N}``: the page to request and how many of its records were already
taken. When the API names a next page, that is ``{"url": next, "skip": 0}``; on the last page
(no next yet) it is that page's own URL with ``skip`` = its record count, so a later poll asks
the same page again and takes only records appended since: nothing is read twice, nothing is
skipped.

Options:

``url``           the first page (required; http or https).
``records``       where the records are in a page: a dotted path into the JSON body
                  (``data``, ``result.items``); empty (default) = the body is the list.
``cursor_field``  a dotted path to the next cursor in the body (``next_cursor``);
``cursor_param``  the query parameter that sends it back (default ``cursor``). Without
                  ``cursor_field``, ``Link: <...>; rel="next"`` headers are followed.
``rate``          at most this many requests per second (default 10).
``retries``       attempts per request on connection errors, 429 and 5xx (default 5),
                  with exponential backoff and ``Retry-After`` honoured.
``timeout``       seconds per request (default 30).
``headers``       a table of extra request headers (e.g. ``Accept``). Values of the form
                  ``env:NAME`` are read from the environment, so secrets stay out of configs.

A cursor that stops advancing (the API answers a page whose next page is itself, or cycles)
ends the read and reports the connector as ``stalled``; nothing is taken twice.

A backfill range is ``start`` = the page URL to start from (default: ``url``) and ``end`` = a
page URL at which to stop (exclusive; default: the last page), both on ``url``'s host. A
backfill keeps a digest per page it took; running the same range again takes only the pages
whose records changed since (all of such a page's records: a page is the unit of change).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from icefloe.ingest.contract import (
    BackfillRange,
    Checkpoint,
    Connector,
    Envelope,
    Health,
    InvalidOptions,
    ReportedHealth,
    SourceDataError,
    SourceUnavailable,
    State,
)

logger = logging.getLogger("icefloe.ingest.http")

PARTITION = ""
OPTIONS = {"url", "records", "cursor_field", "cursor_param", "rate", "retries", "timeout", "headers"}
MAX_PAGE_BYTES = 64 * 1024 * 1024
MAX_BACKOFF_S = 30.0


class HttpJsonConnector(Connector):
    kind = "http"
    known_options = frozenset(OPTIONS)

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        url = self.options.get("url")
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in {"http", "https"}:
            raise InvalidOptions("the http connector needs url = an http:// or https:// URL")
        self.url = url
        self.records_path = _str(self.options, "records", "")
        self.cursor_field = _str(self.options, "cursor_field", "")
        self.cursor_param = _str(self.options, "cursor_param", "cursor")
        self.rate = _number(self.options, "rate", 10.0)
        self.retries = int(_number(self.options, "retries", 5))
        self.timeout = _number(self.options, "timeout", 30.0)
        headers = self.options.get("headers", {})
        if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
            raise InvalidOptions("headers must be a table of strings")
        self._headers = {str(k): str(v) for k, v in headers.items()}
        self._position: dict[str, Any] = {"url": url, "skip": 0}
        self._stop_at: str | None = None
        self._backfill: dict[str, str] | None = None
        self._backfill_done = False
        self._last_request = 0.0
        self._health = ReportedHealth()

    def source_uri(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"  # no query, no user info: no secrets

    def discover(self) -> pa.Schema:
        records, _ = self._page(self.url)
        return pa.Table.from_pylist(records).schema if records else pa.schema([])

    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        start = self.url
        self._stop_at = None
        self._backfill = None
        if backfill is not None:
            origin = urllib.parse.urlsplit(self.url)[:2]
            for value in (backfill.start, backfill.end):
                # Same scheme, host and port as the connector's URL: a backfill may not make the
                # server call anywhere else.
                if value is not None and urllib.parse.urlsplit(value)[:2] != origin:
                    raise InvalidOptions(f"an http backfill range is start/end URLs on {origin[0]}://{origin[1]}")
            start = backfill.start or self.url
            self._stop_at = backfill.end
            # Backfill positions are per page: page URL -> digest of the records taken from it.
            self._backfill = dict(checkpoint.positions)
            self._position = {"url": start, "skip": 0}
            self._backfill_done = False
            return
        saved = checkpoint.get(PARTITION)
        self._position = {"url": start, "skip": 0}
        if saved is not None:
            try:
                position = json.loads(saved)
                self._position = {"url": str(position["url"]), "skip": int(position["skip"])}
            except (ValueError, KeyError, TypeError):
                raise SourceDataError("the stored http checkpoint is not readable") from None

    def _read_backfill(self, max_rows: int) -> Iterator[Envelope]:
        """Walk the range's pages once; take a page again only if its records changed since
        this backfill last took it (so running the same range again is idempotent)."""
        assert self._backfill is not None
        taken = 0
        seen: set[str] = set()
        while not self._backfill_done and taken < max_rows:
            url = str(self._position["url"])
            if url == self._stop_at or url in seen:
                self._backfill_done = True
                return
            seen.add(url)
            records, next_url = self._page(url)
            digest = _digest(records)
            if next_url is None or next_url == url:
                self._backfill_done = True
            else:
                self._position = {"url": next_url, "skip": 0}
            if self._backfill.get(url) == digest:
                continue
            self._backfill[url] = digest
            rows = pa.Table.from_pylist(records) if records else pa.table({})
            taken += rows.num_rows
            yield Envelope(rows, url[:1024], digest, version=digest)

    def read(self, max_rows: int) -> Iterator[Envelope]:
        if self._backfill is not None:
            yield from self._read_backfill(max_rows)
            return
        taken = 0
        seen: set[tuple[str, int]] = set()
        while taken < max_rows:
            url, skip = str(self._position["url"]), int(self._position["skip"])
            if self._stop_at is not None and url == self._stop_at:
                self._health.set(Health(State.UP, pending=0))
                return
            if (url, skip) in seen:
                self._stalled(url)
                return
            seen.add((url, skip))
            records, next_url = self._page(url)
            fresh = records[skip:]
            if next_url == url:  # the API names this very page as the next one
                if not fresh:
                    self._stalled(url)
                    return
                next_url = None
            if next_url is not None:
                position: dict[str, Any] = {"url": next_url, "skip": 0}
            else:  # the last page for now: ask it again later, past what was taken
                position = {"url": url, "skip": max(skip, len(records))}
            if not fresh and position == self._position:
                self._health.set(Health(State.UP, pending=0))
                return  # caught up
            self._position = position
            rows = pa.Table.from_pylist(fresh) if fresh else pa.table({})
            taken += rows.num_rows
            digest = _digest(fresh)
            self._health.set(Health(State.UP, pending=None if next_url else 0))
            yield Envelope(rows, PARTITION, json.dumps(position, separators=(",", ":")), version=digest)
            if next_url is None:
                return

    def health(self) -> Health:
        return self._health.get()

    def _stalled(self, url: str) -> None:
        logger.warning("http source %s: the cursor stopped advancing at %s", self.source_uri(), _redacted(url))
        self._health.set(Health(State.STALLED, "the source's cursor stopped advancing (its next page is one "
                                               "already read)"))

    # -- HTTP ---------------------------------------------------------------------------

    def _page(self, url: str) -> tuple[list[dict[str, Any]], str | None]:
        body, link = self._get(url)
        try:
            document = json.loads(body)
        except ValueError:
            raise self._data_error(f"the page at {_redacted(url)} is not JSON") from None
        records = _at(document, self.records_path)
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            where = self.records_path or "the body"
            raise self._data_error(f"{where} of the page at {_redacted(url)} is not a list of objects")
        next_url: str | None = None
        if self.cursor_field:
            cursor = _at(document, self.cursor_field)
            if cursor not in (None, ""):
                next_url = _with_param(url, self.cursor_param, str(cursor))
        elif link:
            next_url = _next_link(link, url)
        return records, next_url

    def _data_error(self, message: str) -> SourceDataError:
        self._health.set(Health(State.FAILED, message))
        return SourceDataError(message)

    def _get(self, url: str) -> tuple[bytes, str]:
        headers = {"Accept": "application/json", "User-Agent": "icefloe-ingest"}
        for name, value in self._headers.items():
            headers[name] = os.environ.get(value[4:], "") if value.startswith("env:") else value
        delay = 0.2
        last = ""
        for attempt in range(1, self.retries + 1):
            self._pace()
            retry_after: float | None = None
            try:
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - http(s) only
                    body = response.read(MAX_PAGE_BYTES + 1)
                    if len(body) > MAX_PAGE_BYTES:
                        raise self._data_error(f"a page is larger than {MAX_PAGE_BYTES} bytes")
                    return body, response.headers.get("Link", "")
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
                if exc.code != 429 and exc.code < 500:
                    raise self._data_error(f"the source answered HTTP {exc.code} for {_redacted(url)}") from None
                retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            except (urllib.error.URLError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))[:200]
            if attempt < self.retries:
                wait = min(retry_after if retry_after is not None else delay, MAX_BACKOFF_S)
                logger.info("http source %s: %s (attempt %d); retrying in %.1fs",
                            self.source_uri(), last, attempt, wait)
                time.sleep(wait)
                delay = min(delay * 2, MAX_BACKOFF_S)
        self._health.set(Health(State.DOWN, f"the source does not answer: {last}"))
        raise SourceUnavailable(f"the source does not answer after {self.retries} attempts: {last}")

    def _pace(self) -> None:
        """At most ``rate`` requests per second (one interval between requests)."""
        if self.rate <= 0:
            return
        wait = self._last_request + 1.0 / self.rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._last_request = time.monotonic()


def _digest(records: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(records, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def _at(document: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        if not isinstance(document, dict):
            return None
        document = document.get(part)
    return document


def _with_param(url: str, name: str, value: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != name]
    query.append((name, value))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def _next_link(header: str, base: str) -> str | None:
    for part in header.split(","):
        target, _, params = part.partition(";")
        target = target.strip()
        if not (target.startswith("<") and target.endswith(">")):
            continue
        rels = [p.strip() for p in params.split(";")]
        if any(r.replace(" ", "") in {'rel="next"', "rel=next"} for r in rels):
            return urllib.parse.urljoin(base, target[1:-1])
    return None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed is not None else None


def _redacted(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.hostname or "", query=""))


def _str(options: Mapping[str, Any], name: str, default: str) -> str:
    value = options.get(name, default)
    if not isinstance(value, str):
        raise InvalidOptions(f"{name} must be a string")
    return value


def _number(options: Mapping[str, Any], name: str, default: float) -> float:
    value = options.get(name, default)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InvalidOptions(f"{name} must be a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidOptions(f"{name} must be a number >= 0")
    return float(value)
