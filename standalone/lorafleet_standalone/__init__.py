"""Standalone mode: the whole system on one machine, driven by a folder of manifests."""
