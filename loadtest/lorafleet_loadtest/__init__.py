"""`lorafleet loadtest` (cmd_loadtest): the production trace through a gateway, measured.

plan (pure): trace window -> aliases and servable lengths; driver: sending (open-loop replay,
closed-loop throughput); stats (pure): figures by tier and alias; overhead (pure): throughput
rows vs the base model; report (pure): JSON document and markdown; plots: PNGs; session: one
invocation's runs and files.
"""
