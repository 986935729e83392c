"""The service façade (aioqueue/_service, aioqueue/_admin): builder, lifecycle, registration,
browsing."""
