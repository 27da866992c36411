"""What the server tells operators: Prometheus metrics, the query log, the operations
summary behind the watch page, and logging set-up."""
