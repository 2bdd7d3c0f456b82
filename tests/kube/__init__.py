"""Kubernetes tests: the test API server, its conformance suite and the DGD actuator tests."""
