"""Every example in the docs (README.md and docs/**/*.md) runs against a real server, as a
reader would run it: its text is taken from the file, only the server address is swapped for
the test server's (and, where an example needs what an earlier one on the page made, that
earlier example runs first). A fenced ``python``, ``bash`` or ``sql`` block that cannot run here
says why in an HTML comment on the line before it: ``<!-- not-run: REASON -->``.

- Python blocks are claimed by a line only they hold (``KEYS``) and run by the tests below, which
  also check what they print; a Python block added without a test fails ``test_every_example_is_run``.
- Bash blocks run one by one under ``bash -euo pipefail`` with ``icefloe`` on PATH and
  ``ICEFLOE_URI`` naming the server; ``.venv/bin/icefloe`` means that same command.
- SQL blocks run page by page, in order, over one Flight SQL session (statements split at ``;``
  at a line end), so a page's blocks may build on each other.

The DoPut example is also run against a table it does not fit: the server's precise message
must reach the user (it used to be hidden behind ``AttributeError: 'NoneType' object has no
attribute 'to_pybytes'``)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import cli_env
from servers import ROOT, ServerProcess

README_URI = "grpc://127.0.0.1:31337"
# An optional not-run comment, then a fenced block of a language the tests run.
FENCE = re.compile(r"(?:^<!--\s*not-run:(?P<reason>[^>]*)-->\n)?^```(?P<lang>python|bash|sql)\n(?P<code>.*?)^```",
                   re.S | re.M)


@dataclass(frozen=True)
class Block:
    where: str  # path:line of the fence
    lang: str
    code: str
    not_run: str | None  # the reason given, when the block is tagged not-run

    @property
    def page(self) -> str:
        return self.where.rsplit(":", 1)[0]


def doc_files() -> list[Path]:
    docs = ROOT / "docs"
    return [ROOT / "README.md", *(sorted(docs.rglob("*.md")) if docs.is_dir() else [])]


def blocks(lang: str | None = None) -> list[Block]:
    """Every fenced python / bash / sql block of the docs, in page order."""
    found = []
    for path in doc_files():
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start("lang")) + 1
            reason = match.group("reason")
            found.append(Block(f"{path.relative_to(ROOT)}:{line}", match.group("lang"), match.group("code"),
                               reason.strip() if reason is not None else None))
    return [b for b in found if lang is None or b.lang == lang]


def examples() -> list[tuple[str, str]]:
    """(where, code) of every Python block that runs."""
    return [(b.where, b.code) for b in blocks("python") if b.not_run is None]


# Each example is claimed by a line only it holds; the tests below run them by these keys.
KEYS = {
    "adbc_query": 'cur.execute("SELECT name, population FROM demo.cities WHERE population > ?"',
    "flight_query": 'CommandStatementQuery("SELECT * FROM demo.cities").pack()))',
    "doput": 'options = flight.FlightCallOptions(headers=[(b"x-icefloe-idempotency-key", b"batch-0001")])',
    "two_phase": 'stage = flight.FlightCallOptions(headers=[(b"x-icefloe-stage", b"job-7f3c")])',
    "adbc_staged": '"adbc.flight.sql.rpc.call_header.x-icefloe-stage": "job-7f3c"',
    "subscribe_client": "from flight_server.cli.client import subscribe",
    "subscribe_flight": 'request = {"feed": "commits.v1", "after": "earliest"',
    "change_scan": 'json.dumps({"changes": "sales.orders", "after": 120, "until": 180}).encode()))',
    "spark": 'uri = "grpc://127.0.0.1:31337"\n\n# Batch: one Spark partition',
    "auth": 'adbc_driver_flightsql.dbapi.connect("grpc://host:31337"',
    "python_api": 'lake = icefloe.open("./warehouse")',
    "pyiceberg_local": 'cat = RocksCatalog("local", warehouse="./warehouse")',
    "pyiceberg_rest": 'cat = RestCatalog("icefloe", uri="http://127.0.0.1:8181")',
    "transaction": "conn.commit()  # both tables, or (ABORTED) neither",
    "tour_python": 'sightings = lake.create_table("tour.sightings"',
    "tour_spark": '.option("table", "tour.sightings").load())',
    "tour_rest": 'print(catalog.load_table("tour.sightings").scan().to_arrow().num_rows)',
}


def example(key: str) -> str:
    matches = [code for _, code in examples() if KEYS[key] in code]
    assert len(matches) == 1, f"{key}: {len(matches)} examples hold {KEYS[key]!r}"
    return matches[0]


def test_every_example_is_run() -> None:
    unclaimed = [where for where, code in examples() if not any(k in code for k in KEYS.values())]
    assert not unclaimed, f"examples without a test in {Path(__file__).name}: {unclaimed}"
    for key in KEYS:
        example(key)
    unexplained = [b.where for b in blocks() if b.not_run is not None and len(b.not_run) < 10]
    assert not unexplained, f"not-run without a reason: {unexplained}"


def test_the_docs_have_examples_of_every_kind() -> None:
    """The collection itself works: blocks of each language are found, and tagged ones are skipped."""
    found = blocks()
    for lang in ("python", "bash", "sql"):
        assert any(b.lang == lang and b.not_run is None for b in found), lang
    assert any(b.not_run for b in found)
    sample = "<!-- not-run: needs DBeaver -->\n```bash\ndbeaver\n```\n\n```sql\nSELECT 1;\n```\n"
    parsed = [(m.group("lang"), m.group("reason")) for m in FENCE.finditer(sample)]
    assert parsed == [("bash", " needs DBeaver "), ("sql", None)]


def _run(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=cli_env())


def _ok(code: str, cwd: Path, timeout: float = 120) -> str:
    result = _run(code, cwd, timeout)
    assert result.returncode == 0, f"{code}\n---\n{result.stderr}"
    return result.stdout


def _live(code: str, cwd: Path, expect: str, timeout: float = 60) -> str:
    """Run an example that follows a feed forever: it must print ``expect``; then it is stopped."""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=cli_env())
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line:
                seen.append(line)
                if expect in line:
                    return "".join(seen)
            elif proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
    finally:
        proc.kill()
        _, err = proc.communicate()
    raise AssertionError(f"{expect!r} not printed; stdout: {''.join(seen)!r}; stderr: {err}")


def _at(code: str, server: ServerProcess) -> str:
    return code.replace(README_URI, server.location)


def _sql(server: ServerProcess, *statements: str) -> None:
    import adbc_driver_flightsql.dbapi as flight_sql

    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
            cur.fetchall()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The server the docs talk to: the demo data, the REST catalog on, and the sales.orders
    table the append examples write."""
    proc = ServerProcess(tmp_path_factory.mktemp("readme") / "warehouse", ["--demo", "--rest-port", "0"]).start()
    try:
        _sql(proc, "CREATE SCHEMA sales", "CREATE TABLE sales.orders (id BIGINT, v VARCHAR)")
        yield proc
    finally:
        proc.stop()
        assert "Traceback" not in proc.log, proc.log


def test_queries(server: ServerProcess, tmp_path: Path) -> None:
    out = _ok(_at(example("adbc_query"), server), tmp_path)
    assert "name" in out and "population" in out and "cities" in out
    _ok(_at(example("flight_query"), server) + "\nassert table.num_rows > 0", tmp_path)


def test_doput_shows_the_commit_and_the_server_s_errors(server: ServerProcess, tmp_path: Path) -> None:
    doput = _at(example("doput"), server)
    out = _ok(doput, tmp_path)
    assert "'table': 'sales.orders'" in out and "'rows': 3" in out
    # The same code against a table the data does not fit: the server's reason, not an AttributeError.
    _sql(server, "CREATE TABLE sales.narrow (id INTEGER, w VARCHAR)")
    refused = _run(doput.replace('for_path("sales", "orders")', 'for_path("sales", "narrow")'), tmp_path)
    assert refused.returncode == 1
    assert "schema mismatch for sales.narrow" in refused.stderr, refused.stderr
    assert "column 'v' is not in the table" in refused.stderr and "'id' is long in the input" in refused.stderr
    assert "AttributeError" not in refused.stderr and "NoneType" not in refused.stderr


def test_two_phase_appends(server: ServerProcess, tmp_path: Path) -> None:
    # The staging example continues the DoPut example (its client, data and imports).
    out = _ok(_at(example("doput") + example("two_phase"), server) + "\nprint('committed', result)", tmp_path)
    assert "committed [" in out
    _ok(_at(example("doput") + example("adbc_staged"), server), tmp_path)


def test_transaction_lands_both_tables(server: ServerProcess, tmp_path: Path) -> None:
    import adbc_driver_flightsql.dbapi as flight_sql

    _sql(server, "CREATE TABLE sales.totals (region VARCHAR, n BIGINT)", "INSERT INTO sales.totals VALUES ('north', 0)")
    _ok(_at(example("transaction"), server), tmp_path)
    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT n FROM sales.totals WHERE region = 'north'")
        assert cur.fetchall() == [(1,)]
        cur.execute("SELECT count(*) FROM sales.orders WHERE id = 1 AND v = 'ann'")
        assert cur.fetchall()[0][0] >= 1


def test_feeds(server: ServerProcess, tmp_path: Path) -> None:
    _live(_at(example("subscribe_client"), server), tmp_path, "sales.orders")
    _live(_at(example("subscribe_flight"), server), tmp_path, "sales orders")


def test_change_scan(server: ServerProcess, tmp_path: Path) -> None:
    from flight_server.cli.client import feed_head

    head = feed_head(server.location, [])
    setup = f"import json\nimport pyarrow.flight as flight\nclient = flight.FlightClient({server.location!r})\n"
    # The example's seqs stand for a range; this server's range is (0, head].
    code = example("change_scan").replace('"after": 120, "until": 180', f'"after": 0, "until": {head}')
    _ok(setup + code + "\nassert sum(t.num_rows for t in rows) > 0", tmp_path)


def test_auth(tmp_path: Path) -> None:
    from flight_server.security.users import hash_password

    users = tmp_path / "users.toml"
    # The example logs in as alice with the password "..." (as written).
    users.write_text(f'[users.alice]\nrole = "read"\npassword_hash = "{hash_password("...")}"\n')
    proc = ServerProcess(tmp_path / "warehouse", ["--users", str(users)]).start()
    try:
        setup = "import adbc_driver_flightsql.dbapi\nimport pyarrow.flight as flight\n"
        code = example("auth").replace("grpc://host:31337", proc.location)
        lines = [line for line in code.splitlines() if not line.startswith("#")]
        _ok(setup + "\n".join(lines[:-1]) + "\nprint(" + lines[-1].split("#")[0].strip() + ")", tmp_path)
    finally:
        proc.stop()


def test_python_api(tmp_path: Path) -> None:
    # Its own server: the example creates sales.orders with other columns.
    proc = ServerProcess(tmp_path / "served").start()
    try:
        out = _ok(_at(example("python_api"), proc), tmp_path)
        assert "append 2" in out  # the subscription's first event: the append of two rows
        _ok(textwrap.dedent(f"""
            import icefloe
            daily = icefloe.connect({proc.location!r}).table("sales.daily").scan().to_table().sort_by("id")
            assert daily.column("total").to_pylist() == [10, 30], daily
        """), tmp_path)
    finally:
        proc.stop()


def test_pyiceberg_local_catalog(tmp_path: Path) -> None:
    setup = 'import pyarrow as pa\narrow_table = pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})\n'
    _ok(setup + example("pyiceberg_local") + "\nassert tbl.scan().to_arrow().num_rows == 2", tmp_path)


def test_pyiceberg_rest(server: ServerProcess, tmp_path: Path) -> None:
    rest = re.search(r"icefloe REST catalog on (http://\S+)", server.log)
    assert rest is not None, server.log
    setup = ('import pyarrow as pa\narrow_table = pa.table({"id": pa.array([7], pa.int64()), '
             '"v": pa.array(["rest"], pa.large_string())})\n')
    _ok(setup + example("pyiceberg_rest").replace("http://127.0.0.1:8181", rest.group(1).rstrip("/")), tmp_path)


def test_spark(server: ServerProcess, tmp_path: Path) -> None:
    import shutil

    if shutil.which("java") is None:
        pytest.skip("java is not installed: the Spark example needs a JVM")
    setup = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests" / "pyspark_icefloe")!r})
        from spark_support import make_session
        spark = make_session()
    """)
    snapshot = _snapshot_id(server)
    _ensure_tour_table(server)
    code = (example("spark").replace(README_URI, server.location)
            .replace("5368536755240492709", str(snapshot))
            .replace("/chk/mirror", str(tmp_path / "chk")))
    tour = example("tour_spark").replace(README_URI, server.location)
    out = _ok(setup + code + "\nprint('rows', df.count(), old.count(), q.count())\n" + tour + "\nspark.stop()",
              tmp_path, timeout=300)
    assert "sum(floes)" in out, out


def _snapshot_id(server: ServerProcess) -> int:
    import adbc_driver_flightsql.dbapi as flight_sql

    with flight_sql.connect(server.location, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute('SELECT snapshot_id FROM sales."orders$snapshots" ORDER BY committed_at LIMIT 1')
        return int(cur.fetchall()[0][0])


def test_icefloe_tail_install_puts_it_on_path() -> None:
    """The docs ran ``icefloe-tail`` after a plain ``cargo build``, which leaves it in
    target/release (not on PATH). It now says ``cargo install --path ...``: that package must
    declare the binary (cargo install puts it in ~/.cargo/bin, which rustup puts on PATH).
    Checked with ``cargo metadata`` (offline); compiling arrow-flight here would take minutes."""
    import json
    import shutil

    text = (ROOT / "docs" / "rust.md").read_text()
    install = re.search(r"^cargo install --locked --path (\S+)", text, re.M)
    assert install is not None, "docs/rust.md must install icefloe-tail with cargo install"
    assert "cargo build --release        # target/release/icefloe-tail" not in text
    assert re.search(r"^icefloe-tail --uri ", text, re.M), "docs/rust.md runs icefloe-tail by name"
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed")
    meta = subprocess.run(["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1",
                           "--manifest-path", str(ROOT / install.group(1) / "Cargo.toml")],
                          capture_output=True, text=True, timeout=120, check=True)
    package = json.loads(meta.stdout)["packages"][0]
    assert Path(package["manifest_path"]).parent == ROOT / install.group(1)
    assert any(t["name"] == "icefloe-tail" and "bin" in t["kind"] for t in package["targets"])


def _ensure_tour_table(server: ServerProcess) -> None:
    """The README tour's table, when the tour's Python block has not made it (a test run alone)."""
    _sql(server, "CREATE SCHEMA IF NOT EXISTS tour",
         "CREATE TABLE IF NOT EXISTS tour.sightings (city VARCHAR, floes BIGINT)",
         "INSERT INTO tour.sightings VALUES ('Oslo', 3)")


def test_readme_tour(tmp_path: Path) -> None:
    # Its own server, as a reader's first run of the tour would have (the tour creates its namespace).
    server = ServerProcess(tmp_path / "warehouse", ["--demo", "--rest-port", "0"]).start()
    try:
        _readme_tour(server, tmp_path)
    finally:
        server.stop()
    assert "Traceback" not in server.log, server.log


def _readme_tour(server: ServerProcess, tmp_path: Path) -> None:
    out = _ok(_at(example("tour_python"), server), tmp_path)
    seqs = re.search(r"committed seqs (\d+) (\d+)", out)
    assert seqs is not None, out
    first, second = int(seqs.group(1)), int(seqs.group(2))
    assert f"{first} append 2" in out and f"{second} append 1" in out, out
    assert "Bergen" in out and "Oslo" not in out.split(f"{second} append 1", 1)[1], out  # only (first, second]
    rest = re.search(r"icefloe REST catalog on (http://\S+)", server.log)
    assert rest is not None, server.log
    out = _ok(example("tour_rest").replace("http://127.0.0.1:8181", rest.group(1).rstrip("/")), tmp_path)
    assert out.strip().splitlines()[-1] == "3", out


# --- bash and SQL blocks: run as they are written ---------------------------------------------

def _runnable(lang: str) -> list[Block]:
    return [b for b in blocks(lang) if b.not_run is None]


@pytest.fixture(scope="module")
def shell_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for PATH holding ``icefloe``: this checkout's command line on this Python."""
    folder = tmp_path_factory.mktemp("bin")
    command = folder / "icefloe"
    command.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m flight_server.cli \"$@\"\n")
    command.chmod(0o755)
    return folder


@pytest.mark.parametrize("block", _runnable("bash"), ids=lambda b: b.where)
def test_bash_example(block: Block, server: ServerProcess, shell_bin: Path, tmp_path: Path) -> None:
    code = _at(block.code, server).replace(".venv/bin/icefloe", "icefloe")
    # Scripts of this repository run from its root (as the docs show them); the rest in a scratch folder.
    cwd = ROOT if "./scripts/" in code else tmp_path
    env = cli_env({"ICEFLOE_URI": server.location, "PATH": f"{shell_bin}{os.pathsep}{os.environ['PATH']}"})
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=cwd, capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, f"{block.where}\n{code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr


def _statements(code: str) -> list[str]:
    return [s.strip() for s in re.split(r";\s*$", code, flags=re.M) if s.strip()]


SQL_PAGES = sorted({b.page for b in _runnable("sql")})


@pytest.mark.parametrize("page", SQL_PAGES)
def test_sql_examples(page: str, server: ServerProcess) -> None:
    import adbc_driver_flightsql.dbapi as flight_sql

    # One session (the cookie middleware keeps it), as a SQL tool keeps one: BEGIN ... COMMIT span statements.
    kwargs = {"adbc.flight.sql.rpc.with_cookie_middleware": "true"}
    with flight_sql.connect(server.location, db_kwargs=kwargs, autocommit=True) as conn, conn.cursor() as cur:
        for block in [b for b in _runnable("sql") if b.page == page]:
            for statement in _statements(block.code):
                try:
                    cur.execute(statement)
                    cur.fetchall()
                except Exception as exc:
                    raise AssertionError(f"{block.where}: {statement}\n{exc}") from None
