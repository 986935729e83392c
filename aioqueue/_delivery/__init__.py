"""Getting due events to handlers: the dispatcher (schedule -> ready list), one consumer per
handler (claims only for free slots, hands deliveries to a fixed pool of workers), the handler
runner, timeouts and acknowledgements. Imports `_wire`, `_transport` and `_model`."""
