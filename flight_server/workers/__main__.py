"""``python -m flight_server.workers``: one read worker (started by ``pool.ReadWorkerPool``)."""

from flight_server import allocator  # noqa: F401 - first: sets mimalloc's options before pyarrow loads
from flight_server.workers.read_worker import main

main()
