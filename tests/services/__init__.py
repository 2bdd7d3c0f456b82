"""Real service processes for tests (each one started on a free loopback port, then stopped)."""
