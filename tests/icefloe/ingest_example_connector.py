"""Connectors of "a user's own", as docs/ingestion.md shows them, run by the tests: the docs'
``Countdown`` (loaded by a server config as ``ingest_example_connector:Countdown``), and a
transactional source that emits source transactions spread over several envelopes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from icefloe.ingest import BackfillRange, Checkpoint, Connector, Envelope, Health, Op, State


class Countdown(Connector):
    """Emits the numbers start..1, one envelope of rows per number (an example)."""

    kind = "countdown"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.start = int(options.get("start", 10))
        self.next = self.start

    def discover(self) -> pa.Schema:
        return pa.schema([("id", pa.int64()), ("name", pa.string())])

    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        done = checkpoint.get("")  # "" = the one partition of this source
        self.next = int(done) - 1 if done is not None else self.start

    def read(self, max_rows: int) -> Iterator[Envelope]:
        while self.next >= 1 and max_rows > 0:
            rows = pa.table({"id": [self.next], "name": [f"n{self.next}"]})
            yield Envelope(rows, partition="", position=str(self.next))
            self.next -= 1
            max_rows -= 1

    def health(self) -> Health:
        return Health(State.UP, pending=max(self.next, 0))


class Transactions(Connector):
    """Source transactions of ``size`` one-row envelopes each; ``ops`` may hold a CDC op to emit."""

    kind = "transactions"

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.count, self.size = int(options["count"]), int(options["size"])
        self.op = Op(options.get("op", "insert"))
        self.at = 0
        self.yielded: list[int] = []

    def discover(self) -> pa.Schema:
        return pa.schema([("id", pa.int64()), ("name", pa.string())])

    def open(self, checkpoint: Checkpoint, backfill: BackfillRange | None = None) -> None:
        self.at = int(checkpoint.get("log") or 0)

    def read(self, max_rows: int) -> Iterator[Envelope]:
        total = self.count * self.size
        for _ in range(max_rows):
            if self.at >= total:
                return
            self.at += 1
            txn = (self.at - 1) // self.size
            self.yielded.append(self.at)
            yield Envelope(pa.table({"id": [self.at], "name": [f"t{txn}"]}), "log", str(self.at), op=self.op,
                           key=("id",) if self.op is not Op.INSERT else (), transaction=f"tx{txn}",
                           transaction_end=self.at % self.size == 0)

    def health(self) -> Health:
        return Health(State.UP)
