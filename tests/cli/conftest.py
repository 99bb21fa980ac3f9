"""Fixtures of the CLI tests: a base model and a manifests folder (tests.manifest_folder)."""

from tests.manifest_folder import base_model, folder

__all__ = ["base_model", "folder"]
