"""Tests of the lorafleet CLI and standalone mode."""
