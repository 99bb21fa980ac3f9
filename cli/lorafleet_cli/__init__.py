"""The `lorafleet` command line: one module per command, each importing its product lazily."""
