"""Producing (aioqueue/_producing, aioqueue/_sync): enqueues, the coalescer, durability,
SyncProducer."""
