"""The metric reader every test uses (tests/scrape.py): a metric that is not exported, or a
gauge that is not there, fails instead of reading as 0."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tests.scrape import MissingSeries, Scrape


def registry() -> tuple[CollectorRegistry, Counter, Gauge, Histogram]:
    r = CollectorRegistry()
    counter = Counter("served", "by tier and tenant", ["tier", "tenant"], registry=r)
    gauge = Gauge("queued", "by pool", ["pool"], registry=r)
    histogram = Histogram("ttft_seconds", "by tier", ["tier"], registry=r)
    return r, counter, gauge, histogram


def test_a_renamed_metric_is_an_error_even_where_zero_is_expected():
    r, *_ = registry()
    scrape = Scrape.of_registry(r)
    for name in ("serve_total", "served", "queue", "ttft_second_count"):
        with pytest.raises(MissingSeries):
            scrape.value(name)
    with pytest.raises(MissingSeries):
        scrape.by_label("serve_total", "tier")


def test_a_declared_counter_that_has_not_counted_reads_zero_and_a_missing_gauge_fails():
    r, counter, gauge, histogram = registry()
    counter.labels(tier="gpu", tenant="acme").inc(2)
    counter.labels(tier="gpu", tenant="globex").inc(3)
    counter.labels(tier="disk", tenant="acme").inc()
    gauge.labels(pool="shared").set(4)
    histogram.labels(tier="gpu").observe(0.1)
    scrape = Scrape.of_registry(r)
    assert scrape.value("served_total", tier="gpu") == 5  # summed over tenants
    assert scrape.value("served_total", tier="gpu", tenant="acme") == 2
    assert scrape.value("served_total", tier="ram") == 0  # declared, nothing counted yet
    assert scrape.value("ttft_seconds_count", tier="gpu") == 1
    assert scrape.value("ttft_seconds_count", tier="ram") == 0
    assert scrape.value("queued", pool="shared") == 4
    with pytest.raises(MissingSeries):
        scrape.value("queued", pool="merged")  # a gauge's absence is not a zero
    assert scrape.by_label("served_total", "tier") == {"gpu": 5, "disk": 1}
