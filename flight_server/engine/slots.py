"""Sandboxed DuckDB databases ("slots") and the private folder they spill to.

A slot is one in-memory DuckDB database with external access off, no extension loading and
its configuration locked; a query has a slot to itself from setup until its reader is
dropped. After each query the slot is checked to be as it was made (no attached database,
variable, table, view or macro left behind); a slot that is not is discarded, never reused.

DuckDB always lets SQL read its own temp directory, even with external access off, so the
spill folder is private: outside the working directory, per server process, mode 0700 under a
per-user parent that must be ours, each slot in its own sub-folder (two DuckDB databases must
not share one), removed when the server stops and swept on the next start after a crash.
Client SQL cannot name it anyway: file functions are refused by the policy (``policy.py``)
and the folder's name is in no answer.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from flight_server import errors
from flight_server.engine.native_tables import KEPT_PREFIX, KeptPositions

logger = logging.getLogger("icefloe.engine")

CATALOG_NAME = "icefloe"
SANDBOX_SETTINGS: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "allow_persistent_secrets": False,
}
# The databases every slot has; anything else attached means the slot was changed.
_BUILTIN_DATABASES = ("memory", CATALOG_NAME, "system", "temp")
_PRISTINE_SQL = (
    "SELECT (SELECT count(*) FROM duckdb_databases() WHERE database_name NOT IN ("
    + ", ".join(f"'{d}'" for d in _BUILTIN_DATABASES)
    + ")) + (SELECT count(*) FROM duckdb_variables())"
    " + (SELECT count(*) FROM duckdb_tables() WHERE NOT (database_name = 'memory' AND schema_name = 'main'"
    f" AND starts_with(table_name, '{KEPT_PREFIX}')))"
)
_NO_VIEWS_SQL = _PRISTINE_SQL + " + (SELECT count(*) FROM duckdb_views() WHERE NOT internal)"
# The views of the slot: only those it keeps (``Slot.kept_views``) may be there between queries.
_VIEWS_SQL = "SELECT database_name, lower(schema_name), lower(view_name) FROM duckdb_views() WHERE NOT internal"
_KEPT_TABLES_SQL = f"SELECT table_name FROM duckdb_tables() WHERE starts_with(table_name, '{KEPT_PREFIX}')"
# The bytes of deleted-row tables one slot keeps (``Slot.hold_tables``); past it the oldest go.
SLOT_KEPT_BYTES = 32 << 20


class SpillFolder:
    """This server's private spill folder: ``<tmp>/icefloe-<uid>/spill-<pid>-<random>/``."""

    def __init__(self, parent: str | None = None) -> None:
        base = Path(parent or tempfile.gettempdir()) / f"icefloe-{os.getuid()}"
        base.mkdir(mode=0o700, exist_ok=True)
        st = base.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise RuntimeError(f"spill parent {base} is not a folder owned by this user")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(base, 0o700)
        _sweep(base)
        self.path = base / f"spill-{os.getpid()}-{secrets.token_hex(8)}"
        self.path.mkdir(mode=0o700)
        self._names = itertools.count()
        logger.info("DuckDB spills to %s", self.path)

    def new_folder(self) -> str:
        folder = self.path / f"slot-{next(self._names)}"
        folder.mkdir(mode=0o700)
        return str(folder)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sweep(base: Path) -> None:
    """Remove spill folders of server processes that no longer run (a crash leaves them)."""
    for entry in base.glob("spill-*-*"):
        try:
            pid = int(entry.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Slot:
    """One sandboxed in-memory DuckDB database; a query has it to itself from setup to the end."""

    def __init__(self, threads: int | None, spill_dir: str | None = None, memory_limit: str | None = None,
                 files: frozenset[str] = frozenset(), single_thread: bool = False, unordered: bool = False) -> None:
        config = dict(SANDBOX_SETTINGS)
        # A slot for queries that read nothing (``SlotPool.take``): one thread, so DuckDB runs
        # the statement on the caller's thread instead of handing its one task to a worker
        # and waiting for it (two thread wake-ups, dear on a loaded machine).
        self.single_thread = single_thread
        if single_thread:
            config["threads"] = 1
        elif threads:
            config["threads"] = threads
        # A slot for scans that apply deletes by position (``native_tables``, one POSITIONAL
        # JOIN per data file, each a one-thread pipeline): DuckDB runs the UNION ALL's branches
        # at once only when it need not keep rows in their insertion order. Results without an
        # ORDER BY then come in any order, as SQL allows; the slots of every other query keep it.
        self.unordered = unordered
        if unordered:
            config["preserve_insertion_order"] = False
        if memory_limit:
            config["memory_limit"] = memory_limit
        # Without a folder of ours DuckDB spills to "<cwd>/.tmp", which it then lets SQL read.
        config["temp_directory"] = spill_dir or ""
        self.files = files
        if files:
            # DuckDB takes allowed_paths only on a started database whose external access is
            # still on: set it, then turn access off, before any other statement runs here.
            config["enable_external_access"] = True
        self.db = duckdb.connect(":memory:", config=config)
        if files:
            self.db.execute("SET allowed_paths = [" + ", ".join(_literal(f) for f in sorted(files)) + "]")
            self.db.execute("SET enable_external_access = false")
            # Footers read once per slot, not once per query (data files never change).
            self.db.execute("SET parquet_metadata_cache = true")
        self.db.execute(f"ATTACH ':memory:' AS {CATALOG_NAME}")
        self.db.execute(f"USE {CATALOG_NAME}")
        # Client SQL must not reach Python objects of the server by name (DuckDB's Python
        # replacement scans look variables up in the calling frames).
        self.db.execute("SET python_enable_replacements = false")
        self.db.execute("SET lock_configuration = true")
        # Views are dropped from this cursor: the query's own cursor may still hold its result.
        self.admin = self.db.cursor()
        self.admin.execute(f"USE {CATALOG_NAME}")
        self.uses = 0
        # Owned by the one query that holds the slot, like the slot itself: no lock.
        self._kept: duckdb.DuckDBPyConnection | None = None
        # Views over read_parquet of this slot's files that outlive their query (see
        # ``keep_view``): (schema, view name), both lower case as DuckDB matches them -> body.
        self.kept_views: dict[tuple[str, str], str] = {}
        self._kept_names: dict[tuple[str, str], str] = {}  # the same key -> the quoted name
        self.kept_schemas: set[str] = set()
        # Tables of deleted rows in memory.main that outlive their query (``hold_tables``):
        # name -> bytes, least recently used first.
        self.kept_tables: dict[str, int] = {}

    def hold_tables(self, needed: Sequence[KeptPositions]) -> None:
        """Make sure each table ``memory.main."<name>"`` of ``needed`` is here
        (``native_tables.KeptPositions``), before the query defines any view: a warm scan of a
        table with deletes then registers nothing and keeps its view.

        A name says what its table holds, so one found here is the right one. Past
        ``SLOT_KEPT_BYTES`` the least recently used tables the query does not need go, with
        every kept view (a view may name one; views are cheap to make again).
        """
        names = {kept.name for kept in needed}
        for kept in needed:
            if kept.name in self.kept_tables:
                self.kept_tables[kept.name] = self.kept_tables.pop(kept.name)  # most recently used
                continue
            spare = [n for n in self.kept_tables if n not in names]
            if spare and sum(self.kept_tables.values()) + kept.nbytes > SLOT_KEPT_BYTES:
                for view in self.unkeep_all():
                    self.admin.execute(f"DROP VIEW IF EXISTS {view}")
                for name in spare:
                    if sum(self.kept_tables.values()) + kept.nbytes <= SLOT_KEPT_BYTES:
                        break
                    self.drop_table(name)
            loading = "__icefloe_loading"
            self.admin.register(loading, kept.make())
            try:
                # An ORDER BY in the select keeps its order in the table, unordered slot or not.
                self.admin.execute(f'CREATE TABLE memory.main."{kept.name}" AS {kept.select.format(loading=loading)}')
            finally:
                self.admin.unregister(loading)
            self.kept_tables[kept.name] = kept.nbytes

    def drop_table(self, name: str) -> None:
        self.kept_tables.pop(name, None)
        self.admin.execute(f'DROP TABLE IF EXISTS memory.main."{name}"')

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor in the icefloe catalog: the one the slot's previous query left as it found
        it (``keep``), else a new one. ``USE`` on a new cursor is a DuckDB statement of its
        own, as dear as the ``SELECT 1`` it is for (~0.3 ms)."""
        cur, self._kept = self._kept, None
        if cur is not None:
            return cur
        cur = self.db.cursor()
        cur.execute(f"USE {CATALOG_NAME}")
        return cur

    def keep(self, cursor: duckdb.DuckDBPyConnection) -> None:
        """Keep ``cursor`` for the slot's next query. Only for a cursor its query left as
        ``cursor()`` made it: nothing registered on it, no setting changed, nothing running
        (the engine decides; see ``QueryRuns.release``)."""
        old, self._kept = self._kept, cursor
        if old is not None and old is not cursor:
            old.close()

    def has_view(self, schema: str, name: str, body: str) -> bool:
        """Whether the slot already has view ``schema.name`` defined as ``body`` (kept from an
        earlier query of the same files), so the query can use it as it is."""
        return self.kept_views.get((schema.lower(), name.lower())) == body

    def keep_view(self, schema: str, name: str, body: str, quoted: str) -> None:
        """Remember that the query just created view ``schema.name`` as ``body`` and that it
        stays for the slot's next queries.

        Only views over the files the slot was made for are kept (``native_tables``): such a
        view is the same text whenever the same pinned snapshot, schema and filter are read,
        so a query finding the very text it needs skips the ``CREATE VIEW`` and its bind of
        ``read_parquet``; a query needing other text replaces the view. A kept view reveals
        nothing a query could not read anyway: the slot can read only these files, and a query
        can only name the tables it pinned (the policy), each of which it defines itself.
        """
        self.kept_schemas.add(schema)
        self.kept_views[(schema.lower(), name.lower())] = body
        self._kept_names[(schema.lower(), name.lower())] = quoted

    def unkeep_all(self) -> list[str]:
        """Stop keeping every view (a query that may have changed them ran); their quoted
        names, to be dropped."""
        names = list(self._kept_names.values())
        self.kept_schemas.clear()  # made again (IF NOT EXISTS) by the next query that needs one
        self.kept_views.clear()
        self._kept_names.clear()
        return names

    def forget_view(self, schema: str, name: str) -> None:
        """The query replaces view ``schema.name`` with one of its own, dropped at its end."""
        self.kept_views.pop((schema.lower(), name.lower()), None)
        self._kept_names.pop((schema.lower(), name.lower()), None)

    def pristine(self) -> bool:
        """Whether the database is as ``__init__`` left it (checked after every query), but
        for the views and position tables it keeps."""
        try:
            # Tables named like kept ones are left out of the counts below: each must be one
            # this slot made.
            tables = {t for (t,) in self.admin.execute(_KEPT_TABLES_SQL).fetchall()}
            if not tables <= self.kept_tables.keys():
                return False
            if not self.kept_views:  # the common case: one statement
                row = self.admin.execute(_NO_VIEWS_SQL).fetchall()[0]
                return row is not None and int(row[0]) == 0
            row = self.admin.execute(_PRISTINE_SQL).fetchall()[0]
            views = self.admin.execute(_VIEWS_SQL).fetchall()
        except duckdb.Error:
            return False
        kept = {(CATALOG_NAME, schema, name) for schema, name in self.kept_views}
        return row is not None and int(row[0]) == 0 and {tuple(v) for v in views} <= kept

    def close(self) -> None:
        try:
            self.db.close()
        except duckdb.Error:
            pass


class SlotPool:
    """The slots queries run in: at most ``size`` of them, reused only when known clean.

    A slot is made for a set of files it may read (``Slot.files``; empty for most) and serves
    only queries that read exactly that set: a query of other files takes a free slot made for
    them, else a new one, closing the least recently used free slot when ``size`` exist.

    Each returned slot gets its query's views dropped, but for the ``read_parquet`` views it
    keeps (``Slot.keep_view``; a suspect query's slot drops those too). Whether it is still as made is known
    cheaply: DuckDB counts, per connection, the statements that may change what names bind
    to (``ATTACH``, ``SET``, ``SET VARIABLE``, ``CREATE``, ``PREPARE``, ``CHECKPOINT``, ...), and
    the engine compares that count around the client's statement. A slot whose count moved,
    whose query failed, or that has served ``AUDIT_EVERY`` queries since its last audit, gets
    the full ``pristine`` check (about a millisecond, too dear for every query); one that
    fails it is closed, never reused.
    """

    AUDIT_EVERY = 64

    def __init__(self, size: int, make: Callable[[frozenset[str], bool, bool], Slot]) -> None:
        self.size = size
        self._make = make
        self._free: list[Slot] = []  # least recently returned first
        self._made = 0
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self.waiting = 0  # queries queued for a slot (for metrics; updated under the lock)

    def take(self, wait_s: float = 5.0, files: frozenset[str] = frozenset(), single_thread: bool = False,
             unordered: bool = False) -> Slot:
        """A clean slot that may read exactly ``files``; a new one while fewer than ``size``
        exist (or in place of a free one made for other files), else wait for one.
        ``single_thread``: a slot whose DuckDB runs one thread (for queries that read nothing);
        ``unordered``: one that need not keep insertion order (``Slot.unordered``). Such slots
        serve only such queries, and count against ``size`` like the others.

        Raises:
            errors.ResourceExhausted: None came free within ``wait_s``.
        """
        deadline = None
        with self._lock:
            while True:
                for i in range(len(self._free) - 1, -1, -1):
                    free = self._free[i]
                    if free.files == files and free.single_thread == single_thread and free.unordered == unordered:
                        return self._free.pop(i)
                evicted = None
                if self._made >= self.size and self._free:
                    evicted = self._free.pop(0)
                    self._made -= 1
                if self._made < self.size:
                    self._made += 1
                    break
                if deadline is None:
                    deadline = time.monotonic() + wait_s
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise errors.ResourceExhausted(
                        f"too many concurrent queries (limit {self.size}); retry later")
                self.waiting += 1
                try:
                    self._returned.wait(remaining)
                finally:
                    self.waiting -= 1
        if evicted is not None:
            evicted.close()
        try:
            return self._make(files, single_thread, unordered)
        except BaseException:
            with self._lock:
                self._made -= 1
                self._returned.notify()
            raise

    def covering(self, files: frozenset[str]) -> frozenset[str] | None:
        """The file set of the free slot that may read the most of ``files`` and nothing
        outside them (a slot made for an earlier snapshot whose files are all still in this
        one: ``native_writes._slot_for``), or None. Slots that read no file are not counted."""
        with self._lock:
            best: frozenset[str] | None = None
            for slot in self._free:
                if slot.files and not slot.single_thread and not slot.unordered and slot.files <= files and (
                        best is None or len(slot.files) > len(best)):
                    best = slot.files
            return best

    def give_back(self, slot: Slot, views: list[str], suspect: bool) -> None:
        """Return a slot a query used (its cursors closed). ``suspect``: the query changed
        engine state or failed, so the slot is audited before anything else."""
        ok = True
        if suspect:  # what the query may have done to a kept view is not known: drop them all
            views = [*views, *slot.unkeep_all()]
        for view in views:
            try:
                slot.admin.execute(f"DROP VIEW IF EXISTS {view}")
            except duckdb.Error:
                ok = False
                logger.warning("could not drop %s; discarding the DuckDB slot", view, exc_info=True)
        if suspect and ok:
            try:
                for name in list(slot.kept_tables):
                    slot.drop_table(name)
            except duckdb.Error:
                ok = False
                logger.warning("could not drop a kept table; discarding the DuckDB slot", exc_info=True)
        slot.uses += 1
        if ok and (suspect or slot.uses % self.AUDIT_EVERY == 0) and not slot.pristine():
            ok = False
            logger.warning("a query left state behind in its DuckDB slot; discarding the slot")
        if not ok:
            slot.close()
        with self._lock:
            if ok:
                self._free.append(slot)
            else:
                self._made -= 1
            self._returned.notify()
