"""Shared lorafleet API: custom-resource models, names, placement and adapter files.

Every component (operator, gateway, agent, CLI) imports from here; nothing here does I/O
beyond reading local adapter files.
"""
