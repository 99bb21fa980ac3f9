"""lorafleet command-line interface and standalone mode."""
