"""Checks against a running gateway with the official `openai` client: the canary probe
(`lorafleet canary`) and the pieces the load test (`e2e/loadtest.py`) shares with it."""
