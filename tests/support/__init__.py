"""What the tests share: event classes and recorders, real processes (CLI, workers, servers,
Spark), the queue model of the property-based test. Fixtures live in tests/conftest.py."""
