"""aioqueue.spark against real Spark: classic, standalone and Spark Connect sessions."""
