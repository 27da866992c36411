"""Cost of authentication per call: bearer-token calls vs. the same calls with auth off.

Two real `icefloe serve` processes over fresh warehouses, one with --users (in-process servers
would share the GIL with the client and measure GIL hand-offs instead of the middleware). Measures a
tiny RPC (ListActions, answered without touching the catalog, so the middleware dominates)
and a Basic login (Argon2id verification). Prints a table; writes a run file benchmarks/results/auth-<UTC time>.json.
Run: PYTHONPATH=. python benchmarks/bench_auth.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.flight as flight

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from run_records import save_run  # noqa: E402
from servers import ServerProcess  # noqa: E402

from flight_server.security.users import hash_password  # noqa: E402


def _time_calls(client: flight.FlightClient, opts: flight.FlightCallOptions, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        client.list_actions(opts)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--logins", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        users = Path(tmp) / "users.toml"
        users.write_text(f'[users.bench]\nrole = "read"\npassword_hash = "{hash_password("bench-pw")}"\n')
        plain = ServerProcess(Path(tmp) / "a").start()
        secured = ServerProcess(Path(tmp) / "b", ["--users", str(users)]).start()
        try:
            c_plain = flight.FlightClient(plain.location)
            c_auth = flight.FlightClient(secured.location)
            bearer = flight.FlightCallOptions(headers=[c_auth.authenticate_basic_token("bench", "bench-pw")])
            none = flight.FlightCallOptions()
            _time_calls(c_plain, none, 50)
            _time_calls(c_auth, bearer, 50)  # warm-up
            basic_opts = flight.FlightCallOptions(headers=[
                (b"authorization", b"Basic " + base64.b64encode(b"bench:bench-pw"))])
            _time_calls(c_auth, basic_opts, 5)  # the first Basic call verifies; later ones hit the cache
            base, auth, basic = [], [], []
            for _ in range(args.rounds):  # interleaved rounds: every case sees the same noise
                base.append(_time_calls(c_plain, none, args.calls))
                auth.append(_time_calls(c_auth, bearer, args.calls))
                basic.append(_time_calls(c_auth, basic_opts, args.calls))
            logins = []
            for i in range(args.logins):  # a different user:password each time: no cache hit
                start = time.perf_counter()
                with contextlib.suppress(flight.FlightUnauthenticatedError):
                    c_auth.authenticate_basic_token("bench", f"wrong-{i}")
                logins.append(time.perf_counter() - start)
            c_plain.close()
            c_auth.close()
        finally:
            plain.stop()
            secured.stop()
    base_us, auth_us = statistics.median(base) * 1e6, statistics.median(auth) * 1e6
    basic_us = statistics.median(basic) * 1e6
    login_ms = statistics.median(logins) * 1e3
    rows = [
        ("ListActions, auth off (baseline)", f"{base_us:.0f} us", "1.00"),
        ("ListActions, bearer token", f"{auth_us:.0f} us", f"{auth_us / base_us:.2f}"),
        ("ListActions, Basic on every call (cached)", f"{basic_us:.0f} us", f"{basic_us / base_us:.2f}"),
        ("Basic login, full Argon2id verification", f"{login_ms:.1f} ms", f"{login_ms * 1e3 / base_us:.0f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'median':>10}  {'ratio':>7}")
    for name, value, ratio in rows:
        print(f"{name:<{width}}  {value:>10}  {ratio:>7}")
    save_run("auth", {
        "calls_per_round": args.calls, "rounds": args.rounds,
        "baseline_call_us": base_us, "bearer_call_us": auth_us, "bearer_over_baseline": auth_us / base_us,
        "basic_every_call_us": basic_us, "basic_every_call_over_baseline": basic_us / base_us,
        "basic_login_ms": login_ms,
    })


if __name__ == "__main__":
    main()
