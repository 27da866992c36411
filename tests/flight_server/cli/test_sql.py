"""``icefloe sql`` as a user runs it: several statements, scripts (-f), stdin, and the prompt."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import clean_failure, cli_env, icefloe, running
from servers import ServerProcess


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running(ServerProcess(tmp_path_factory.mktemp("cli_sql") / "warehouse", ["--demo"])) as proc:
        yield proc


def _count(demo: ServerProcess, table: str) -> int:
    result = icefloe("sql", "--uri", demo.location, "--format", "json", f"SELECT count(*) AS n FROM {table}")
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split(":")[1].strip(" }\n"))


def test_several_statements_in_one_argument(demo: ServerProcess) -> None:
    result = icefloe("sql", "--uri", demo.location, "--format", "json",
                     "SELECT 1 AS a; SELECT 'x;y' AS b; -- a comment; \n SELECT count(*) AS n FROM demo.cities")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ['{"a": 1}', '{"b": "x;y"}', '{"n": 8}']


def test_script_file_runs_in_order_and_stops_at_the_first_error(demo: ServerProcess, tmp_path: Path) -> None:
    script = tmp_path / "setup.sql"
    script.write_text(
        "-- set up a table\n"
        "CREATE SCHEMA script_ns;\n"
        "CREATE TABLE script_ns.t (id BIGINT, note VARCHAR);\n"
        "INSERT INTO script_ns.t VALUES (1, 'semi;colon'), (2, $$dollar;quoted$$);\n"
        "/* a block comment; with a semicolon */\n"
        "SELECT note FROM script_ns.t ORDER BY id;\n"
    )
    result = icefloe("sql", "--uri", demo.location, "-f", str(script), "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-3:] == ['"note"', '"semi;colon"', '"dollar;quoted"']

    broken = tmp_path / "broken.sql"
    broken.write_text(
        "INSERT INTO script_ns.t VALUES (3, 'a');\n\nSELEC 1;\nINSERT INTO script_ns.t VALUES (4, 'b');\n"
    )
    result = icefloe("sql", "--uri", demo.location, "-f", str(broken))
    clean_failure(result, f"{broken}:3: ")
    assert "syntax error" in result.stderr
    assert _count(demo, "script_ns.t") == 3  # the first INSERT ran, the one after the error did not


def test_a_script_transaction_is_one(demo: ServerProcess, tmp_path: Path) -> None:
    """BEGIN in a script holds until its COMMIT / ROLLBACK (the CLI keeps the session cookie,
    where the server keeps the transaction): a rolled-back script lands nothing."""
    assert icefloe("sql", "--uri", demo.location,
                   "CREATE SCHEMA txn_ns; CREATE TABLE txn_ns.a (id BIGINT); CREATE TABLE txn_ns.b (id BIGINT)"
                   ).returncode == 0
    script = tmp_path / "txn.sql"
    script.write_text("BEGIN;\nINSERT INTO txn_ns.a VALUES (1);\nINSERT INTO txn_ns.b VALUES (1);\nROLLBACK;\n")
    result = icefloe("sql", "--uri", demo.location, "-f", str(script))
    assert result.returncode == 0, result.stderr
    assert _count(demo, "txn_ns.a") == 0 and _count(demo, "txn_ns.b") == 0
    script.write_text("BEGIN;\nINSERT INTO txn_ns.a VALUES (1);\nINSERT INTO txn_ns.b VALUES (1);\nCOMMIT;\n")
    result = icefloe("sql", "--uri", demo.location, "-f", str(script))
    assert result.returncode == 0, result.stderr
    assert _count(demo, "txn_ns.a") == 1 and _count(demo, "txn_ns.b") == 1
    result = icefloe("sql", "--uri", demo.location, "COMMIT")
    clean_failure(result, "COMMIT outside a transaction")


def test_statements_from_stdin(demo: ServerProcess) -> None:
    result = icefloe("sql", "--uri", demo.location, "--format", "json",
                     input="SELECT 1 AS a;\nSELECT\n  2 AS b;\nSELECT 3 AS c\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ['{"a": 1}', '{"b": 2}', '{"c": 3}']
    result = icefloe("sql", "--uri", demo.location, "-f", "-", "--format", "json", input="SELECT 4 AS d;")
    assert result.stdout.strip() == '{"d": 4}'
    clean_failure(icefloe("sql", "--uri", demo.location, input="SELECT * FROM demo.nope;"), "<stdin>:1: ")


def test_bad_usage_and_unreachable_server(demo: ServerProcess, tmp_path: Path) -> None:
    script = tmp_path / "one.sql"
    script.write_text("SELECT 1;")
    clean_failure(icefloe("sql", "--uri", demo.location, "-f", str(script), "SELECT 2"), "not both")
    clean_failure(icefloe("sql", "--uri", "grpc://127.0.0.1:1", "SELECT 1"), "cannot reach the server at grpc://")
    clean_failure(icefloe("sql", "--uri", "not a uri", "SELECT 1"), "is not a server location")
    clean_failure(icefloe("sql", "--uri", demo.location, "-f", str(tmp_path / "missing.sql")), "missing.sql")


class _Terminal:
    """The CLI with a pseudo-terminal as stdin, stdout and stderr."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "flight_server.cli", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.seen = ""

    def expect(self, needle: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} not seen; got:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536).decode("utf-8", "replace")
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"{needle!r} not seen before the end; got:\n{self.seen}") from None
        return self.seen

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the prompt did not end; it showed:\n{self.seen}") from None
        finally:
            os.close(self.master)


def test_interactive_prompt_with_history(demo: ServerProcess, tmp_path: Path) -> None:
    history = tmp_path / "history"
    env = cli_env({"ICEFLOE_HISTORY": str(history), "TERM": "dumb"})
    term = _Terminal(["sql", "--uri", demo.location, "--format", "csv"], env)
    try:
        term.expect("icefloe> ")
        term.send("SELECT 'first' AS\n")
        term.expect("...> ")
        term.send("  word;\n")
        term.expect('"first"')
        term.send("SELECT * FROM demo.nope;\n")
        term.expect("error: ")  # reported, and the prompt goes on
        term.send("SELECT 40 + 2 AS answer;\n")
        term.expect('"answer"\r\n42')
        term.send("\\q\n")
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert "Traceback" not in term.seen
    entries = history.read_text().splitlines()
    assert "SELECT 'first' AS word;" in entries and entries[-1] == "SELECT 40 + 2 AS answer;"
    # A new session reads the history: arrow-up recalls the last statement.
    term = _Terminal(["sql", "--uri", demo.location, "--format", "csv"], env)
    try:
        term.expect("icefloe> ")
        term.send("\x1b[A\n")
        # Ctrl-D only once the prompt is back: typed ahead while the terminal is out of raw
        # mode, the line discipline would swallow it.
        term.expect('"answer"\r\n42\r\nicefloe> ')
        term.send("\x04")  # Ctrl-D leaves
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
