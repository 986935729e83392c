"""The façade: EventService, its builder, and its methods grouped by concept (handlers,
producing, dead letters), each group a module over the shared state in `base`."""
