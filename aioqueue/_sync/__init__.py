"""Producing from blocking code (no event loop): the SyncProducer."""
