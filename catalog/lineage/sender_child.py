"""The lineage sender child process: ``python -m catalog.lineage.sender_child``.

Reads frames on stdin (``<n>`` then ``n`` JSON lines), emits each event through the
OpenLineage client configured from this process's environment, answers one status line per
event on stdout (see ``catalog.lineage.sender``). Exits when stdin closes.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from catalog.lineage.sender import SKIPPED, TRANSIENT, emit_all
from catalog.lineage.transport import resolve_client


def main() -> None:
    """The child: read frames on stdin, answer one status line per event on stdout."""
    # Sending is background work: when CPU is short, writers go first (events wait in the
    # outbox meanwhile, they are not lost).
    try:
        os.nice(10)
    except OSError:
        pass
    # Ctrl-C reaches the whole process group: the server decides when we stop (stdin closes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    resolved = resolve_client()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        header = stdin.readline()
        if not header:
            break
        count = int(header)
        if count <= 0:
            continue
        bodies = [stdin.readline() for _ in range(count)]
        if resolved.client is None:
            results = [(TRANSIENT, resolved.state)] + [(SKIPPED, "")] * (count - 1)
        else:
            results = emit_all(resolved.client, bodies)
        try:
            stdout.write(b"".join(f"{status} {detail}".encode() + b"\n" for status, detail in results))
            stdout.flush()
        except BrokenPipeError:
            break  # the server is gone
    if resolved.client is not None:
        try:
            resolved.client.close(timeout=1.0)
        except Exception:
            pass


if __name__ == "__main__":
    main()
