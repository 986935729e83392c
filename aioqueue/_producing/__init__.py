"""Producing: validating events and writing them (one builder of each script call for every
producer), coalescing concurrent enqueues, confirming durable writes, and the run records
of Spark's writers. Imports `_wire`, `_transport` and `_model` only."""
