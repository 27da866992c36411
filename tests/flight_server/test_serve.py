from __future__ import annotations

import pyarrow.flight as flight
from servers import ServerProcess


def test_serve_starts_on_free_port_and_stops_on_sigterm(server: ServerProcess) -> None:
    assert server.location.startswith("grpc://127.0.0.1:")
    assert not server.location.endswith(":0")
    client = flight.FlightClient(server.location)
    client.wait_for_available(timeout=10)
    client.close()
    assert server.stop() == 0
    assert "icefloe stopped" in server.log
    assert (server.warehouse / "catalog.rocksdb" / "CURRENT").exists()
