"""Event classes and their values (aioqueue/_model): definitions, typed values, backoff."""
