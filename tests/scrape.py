"""Reading a Prometheus exposition in tests, where a missing series is an error.

A helper that answers 0 for a series it cannot find lets a renamed metric pass every `== 0`
and every "nothing happened" assertion. `Scrape.value(name, **labels)` is the sum of the
samples called `name` whose labels include `labels` (the others summed over), and:

- a metric the exposition does not declare at all (renamed, never registered) is
  MissingSeries, always;
- a counter's or histogram's accumulating sample (`_total`, `_count`, `_sum`, `_bucket`) of
  a declared metric with no child for these labels is 0: a labelled counter shows a label
  value only once it first counts, and until then it has counted nothing;
- any other sample that is not there (a gauge, an info) is MissingSeries: its absence is
  not a zero.

Read an endpoint (`Scrape.of(url)`) or an in-process registry (`Scrape.of_registry(registry)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# How a family's samples are named after it.
_SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count", "_gsum", "_gcount", "_info")
# Samples that only accumulate: absent for a label set means nothing was counted yet.
_ACCUMULATING = ("_total", "_count", "_sum", "_bucket")


class MissingSeries(AssertionError):
    """The exposition has no such series."""


@dataclass(frozen=True)
class Scrape:
    families: dict[str, list[Sample]]  # family name -> its samples

    @classmethod
    def parse(cls, text: str) -> Scrape:
        return cls({f.name: list(f.samples) for f in text_string_to_metric_families(text)})

    @classmethod
    def of(cls, metrics_url: str, timeout_s: float = 10.0) -> Scrape:
        """One scrape of a `/metrics` URL."""
        resp = httpx.get(metrics_url, timeout=timeout_s)
        resp.raise_for_status()
        return cls.parse(resp.text)

    @classmethod
    def of_registry(cls, registry: CollectorRegistry) -> Scrape:
        return cls.parse(generate_latest(registry).decode())

    def declares(self, name: str) -> bool:
        """Whether `name` is a sample name of a metric this exposition declares."""
        return any(name == family + suffix for family in self.families for suffix in _SUFFIXES)

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples `name` with these labels (see the module's rules)."""
        if not self.declares(name):
            raise MissingSeries(f"no metric {name} in the exposition")
        found = [
            s.value
            for samples in self.families.values()
            for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        if not found and not name.endswith(_ACCUMULATING):
            raise MissingSeries(f"no sample {name}{labels} in the exposition")
        return float(sum(found))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """The samples `name` summed per value of `label` (a declared metric with no sample
        yet is {})."""
        if not self.declares(name):
            raise MissingSeries(f"no metric {name} in the exposition")
        out: dict[str, float] = {}
        for samples in self.families.values():
            for s in samples:
                if s.name == name:
                    key = s.labels.get(label, "")
                    out[key] = out.get(key, 0.0) + s.value
        return out
