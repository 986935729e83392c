"""The wire format (aioqueue/_wire): keys, envelopes, schemas, the type registry, hostile data."""
