"""Closed-loop simulator of prefill/decode/aggregated engine fleets."""
