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
from pathlib import Path
from typing import Any

import duckdb

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
    " + (SELECT count(*) FROM duckdb_views() WHERE NOT internal)"
    " + (SELECT count(*) FROM duckdb_tables())"
)


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

    def __init__(self, threads: int | None, spill_dir: str | None = None, memory_limit: str | None = None) -> None:
        config = dict(SANDBOX_SETTINGS)
        if threads:
            config["threads"] = threads
        if memory_limit:
            config["memory_limit"] = memory_limit
        # Without a folder of ours DuckDB spills to "<cwd>/.tmp", which it then lets SQL read.
        config["temp_directory"] = spill_dir or ""
        self.db = duckdb.connect(":memory:", config=config)
        self.db.execute(f"ATTACH ':memory:' AS {CATALOG_NAME}")
        self.db.execute(f"USE {CATALOG_NAME}")
        # Client SQL must not reach Python objects of the server by name (DuckDB's Python
        # replacement scans look variables up in the calling frames).
        self.db.execute("SET python_enable_replacements = false")
        self.db.execute("SET lock_configuration = true")
        # Views are dropped from this cursor: the query's own cursor may still hold its result.
        self.admin = self.db.cursor()
        self.admin.execute(f"USE {CATALOG_NAME}")

    def cursor(self) -> duckdb.DuckDBPyConnection:
        cur = self.db.cursor()
        cur.execute(f"USE {CATALOG_NAME}")
        return cur

    def pristine(self) -> bool:
        """Whether the database is as ``__init__`` left it (checked after every query)."""
        try:
            row = self.admin.execute(_PRISTINE_SQL).fetchall()[0]
        except duckdb.Error:
            return False
        return row is not None and int(row[0]) == 0

    def close(self) -> None:
        try:
            self.db.close()
        except duckdb.Error:
            pass
