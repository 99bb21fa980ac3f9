"""The settings and metrics reference pages are what the settings classes and the metric
registries say today: a setting or metric added, renamed, re-described or given another
default fails here until `make docs` regenerates the pages."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from lorafleet_gateway.settings import GatewaySettings
from tests.docs import reference_pages
from tests.docs.reference_pages import COMMAND, COMPONENTS, drifted, settings_page
from tests.exported_metrics import exported_families


def test_the_generated_pages_match_the_classes_and_registries():
    stale = [str(p.relative_to(reference_pages.ROOT)) for p in drifted()]
    assert not stale, f"{stale} out of date: run {COMMAND} (or make docs)"


def test_every_setting_says_what_it_is():
    """The page's meaning column comes from `Field(description=...)`: a setting without one
    would be listed with nothing to say."""
    bare = [
        f"{c.cls.__name__}.{name}"
        for c in COMPONENTS
        for name, field in c.cls.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not bare, f"give these a Field(description=...): {bare}"


def test_every_variable_and_metric_is_on_its_page():
    settings = reference_pages.SETTINGS_PAGE.read_text()
    metrics = reference_pages.METRICS_PAGE.read_text()
    missing = [
        variable
        for c in COMPONENTS
        for name, field in c.cls.model_fields.items()
        for variable in reference_pages.variables(c.cls, name, field)
        if f"`{variable}`" not in settings
    ]
    missing += [f for f in exported_families() if f"`{f}" not in metrics]
    assert not missing, missing


def test_a_new_or_changed_setting_changes_the_page(monkeypatch):
    before = settings_page()

    class Wider(GatewaySettings):
        model_config = SettingsConfigDict(env_prefix="LORAFLEET_GATEWAY_", extra="ignore")
        new_knob: int = Field(default=7, ge=1, description="a knob added without regenerating")

    gateway = COMPONENTS[0]
    assert gateway.cls is GatewaySettings
    monkeypatch.setattr(
        reference_pages,
        "COMPONENTS",
        (type(gateway)(gateway.title, Wider, gateway.where), *COMPONENTS[1:]),
    )
    after = settings_page()
    assert after != before
    assert (
        "| `LORAFLEET_GATEWAY_NEW_KNOB` | int, ≥ 1 | 7 |  | a knob added without regenerating |"
        in after
    )
