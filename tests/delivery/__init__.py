"""Delivery (aioqueue/_delivery): dispatch, claims, leases, handlers, flow control, wake-ups."""
