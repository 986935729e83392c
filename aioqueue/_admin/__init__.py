"""What operators do to queues by type *name*, without the events' Python classes: queue
statistics and dead-letter actions, for the CLI, the HTTP API and Prometheus. Imports
`_producing`, `_wire`, `_transport` and `_model`."""
