"""The churn benchmark's figures from samples, without a server (its run needs a vLLM)."""

from __future__ import annotations

import pytest

from benchmarks.engine_heap_churn import VARIANTS, Point, VariantResult, main, table


def test_slopes_are_per_100_loads_after_the_warmup_and_rates_per_second():
    r = VariantResult("glibc", {}, loads=300, requests=900, tokens=9000, seconds=60.0)
    # +500 MiB in the warm-up, then +10 MiB per 100 loads.
    r.points = [Point(0, 0, 1000, 100), Point(10, 50, 1500, 600)]
    r.points += [Point(10 + i, 50 + 25 * i, 1500 + 2.5 * i, 600 + 2.5 * i) for i in range(1, 11)]
    row = r.summary(warmup_s=10)
    assert row["rss_mib_per_100_loads"] == pytest.approx(10.0)
    assert row["heap_mib_per_100_loads"] == pytest.approx(10.0)
    assert (row["rss_first_mib"], row["rss_last_mib"]) == (1000, 1525)
    assert (row["loads_per_s"], row["tokens_per_s"]) == (5.0, 150.0)
    assert row["env"] == "(none)"
    assert "| glibc | 1000 | 1525.0 | 10.0 |" in table([row])


def test_the_variants_are_the_allocator_settings_compared():
    assert VARIANTS["glibc"] == {}
    assert VARIANTS["arena2"] == {"MALLOC_ARENA_MAX": "2"}
    assert "LD_PRELOAD" in VARIANTS["jemalloc"]
    with pytest.raises(SystemExit):
        main(["--variants", "glibc,tcmalloc-typo"])
