"""Read workers: processes that run query tickets (DoGet) for the server that planned them.

``icefloe serve --read-workers N`` starts N of them (``pool``); each is a read-only server
(``read_worker``) over the same warehouse, sharing the signing keys, so the DuckDB execution and
Arrow streaming of reads leave the primary's GIL. See docs/read-workers.md.
"""
