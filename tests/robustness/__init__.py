"""Adversarial inputs on every input path: bad input is a dead letter or a clear error."""
