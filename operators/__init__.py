"""The planner's logic: pure Python, no I/O, no clock reads. Imports only ``schemas``."""
