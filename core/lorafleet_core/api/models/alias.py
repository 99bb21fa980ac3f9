"""AdapterAlias: a tenant's public model name pointing at one LoRAAdapter, or splitting its
traffic by weight between versions (`spec.split`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from lorafleet_core.api.models.common import (
    ALIAS_MODEL,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    CamelModel,
    Condition,
    ObjectMeta,
    SpecModel,
    immutable,
)

# A Deployment's default progressDeadlineSeconds: long enough for a replica to fetch and verify
# a large adapter from a slow store, short enough that a stalled deploy is noticed the same hour.
DEFAULT_PROGRESS_DEADLINE_S = 600

# Weights are whole percent; spec.adapter keeps at least 1, so a split never starves the
# primary (100% to another version is a deploy: set spec.adapter to it).
SPLIT_WEIGHT_MAX = 99
# A handful of versions at once is a rollout; more is a mistake, and the bound keeps the
# O(n^2) distinctness rule and the gateway's per-request walk trivially cheap.
SPLIT_MAX = 8
SPLIT_SUM_RULE = "!has(self.split) || self.split.map(s, s.weight).sum() <= 99"
SPLIT_PRIMARY_RULE = "!has(self.split) || self.split.all(s, s.adapter != self.adapter)"


class SplitTarget(SpecModel):
    """One version of a weighted alias and the percent of requests it takes."""

    adapter: str = Field(
        description="Name of a LoRAAdapter (same namespace, same tenant) other than spec.adapter.",
        pattern=DNS_SUBDOMAIN,
        max_length=253,
    )
    weight: int = Field(
        ge=1,
        le=SPLIT_WEIGHT_MAX,
        description="Percent of the alias's requests this version takes (1..99).",
    )


def traffic_summary(primary: str | None, split: list[SplitTarget] | None) -> str | None:
    """`v1=95,v2=5`: the whole traffic split, primary first (None when there is no split)."""
    if not primary or not split:
        return None
    rest = 100 - sum(s.weight for s in split)
    return ",".join([f"{primary}={rest}", *(f"{s.adapter}={s.weight}" for s in split)])


class AdapterAliasSpec(SpecModel):
    """A public model name pointing at one LoRAAdapter (`adapter`), optionally sending a share
    of its requests to other versions (`split`). Changing `adapter` deploys."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.model.startsWith(self.tenant + '/')",
                    "message": "model must start with '<spec.tenant>/': an alias can only name "
                    "its own tenant's models",
                },
                {
                    "rule": SPLIT_PRIMARY_RULE,
                    "message": "split must not name spec.adapter: the primary version takes "
                    "the traffic the split leaves",
                },
                {
                    "rule": SPLIT_SUM_RULE,
                    "message": "split weights must add up to at most 99 (percent): spec.adapter "
                    "takes the rest, at least 1; to send it all to one version, make it "
                    "spec.adapter",
                },
            ]
        }
    )

    model: str = Field(
        description="Public model name clients send, tenant/name:tag, e.g. acme/support:prod.",
        pattern=ALIAS_MODEL,
        max_length=191,
        json_schema_extra=immutable(
            "model is immutable: create a new AdapterAlias for another model name"
        ),
    )
    tenant: str = Field(
        description="Tenant that owns the alias; a DNS label.",
        pattern=DNS_LABEL,
        max_length=63,
        json_schema_extra=immutable("tenant is immutable: create a new AdapterAlias"),
    )
    adapter: str = Field(
        description="Name of the LoRAAdapter (same namespace, same tenant) the alias serves.",
        pattern=DNS_SUBDOMAIN,
        max_length=253,
    )
    split: list[SplitTarget] | None = Field(
        default=None,
        max_length=SPLIT_MAX,
        description="Weighted rollout: other versions and the percent of requests each takes "
        "(integers 1..99, distinct adapters, none equal to spec.adapter, adding up to at most "
        "99); spec.adapter takes the rest. 95/5 is adapter v1 with split [{adapter: v2, "
        "weight: 5}]. A request that names a user (OpenAI `user`, else `safety_identifier`) "
        "stays on one version while the weights are unchanged. Each version takes traffic "
        "only once it passes the deploy gate (Ready, files verified by a replica); until then "
        "its share stays with the version serving spec.adapter. Remove an entry to roll it "
        "back.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["adapter"],
        },
    )
    progress_deadline_seconds: int = Field(
        default=DEFAULT_PROGRESS_DEADLINE_S,
        ge=1,
        le=2_147_483_647,
        description="Seconds a deploy may take before it is reported stalled: once "
        "spec.adapter has named a version for this long and no replica has verified its files "
        "(or it is still Pending), Deployed turns False with reason ProgressDeadlineExceeded "
        "and a Warning Event is emitted. Nothing is rolled back: the previous version keeps "
        "serving and the deploy still completes if a replica verifies the version later. "
        "As a Deployment's progressDeadlineSeconds; default 600.",
    )

    @model_validator(mode="after")
    def _model_in_tenant(self) -> AdapterAliasSpec:
        if not self.model.startswith(self.tenant + "/"):
            raise ValueError(
                f"model {self.model!r} must start with {self.tenant + '/'!r}: an alias can "
                "only name its own tenant's models"
            )
        split = self.split or []
        if any(s.adapter == self.adapter for s in split):
            raise ValueError(
                f"split must not name spec.adapter ({self.adapter}): the primary version "
                "takes the traffic the split leaves"
            )
        names = [s.adapter for s in split]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"split names {', '.join(twice)} more than once")
        total = sum(s.weight for s in split)
        if total > SPLIT_WEIGHT_MAX:
            raise ValueError(
                f"split weights add up to {total}, more than 99 (percent): spec.adapter takes "
                "the rest, at least 1; to send it all to one version, make it spec.adapter"
            )
        return self


class AliasHistoryEntry(CamelModel):
    """One deploy of an alias."""

    adapter: str = Field(
        description="Adapter the alias pointed to.", pattern=DNS_SUBDOMAIN, max_length=253
    )
    at: datetime = Field(description="When the alias started pointing to it.")


class AliasDeploy(CamelModel):
    """A deploy in progress: spec.adapter names a version that status.adapter does not yet."""

    adapter: str = Field(
        description="The version being deployed (spec.adapter).",
        pattern=DNS_SUBDOMAIN,
        max_length=253,
    )
    started_at: datetime = Field(
        description="When the operator first saw spec.adapter name it; "
        "spec.progressDeadlineSeconds counts from here."
    )


class AdapterAliasStatus(CamelModel):
    """Written by the operator: what the alias serves now and its deploy history."""

    adapter: str | None = Field(
        default=None, description="Adapter currently served.", max_length=253
    )
    previous_adapter: str | None = Field(
        default=None,
        description="Adapter served before the last deploy (the rollback target).",
        max_length=253,
    )
    split: list[SplitTarget] | None = Field(
        default=None,
        max_length=SPLIT_MAX,
        description="The versions of spec.split that take traffic now (each passed the deploy "
        "gate), with their percent; status.adapter takes the rest. Absent: no split in force.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["adapter"],
        },
    )
    traffic: str | None = Field(
        default=None,
        # Every version's name (<= 253) and `=NN,`, the primary's included.
        max_length=(253 + 4) * (SPLIT_MAX + 1),
        description="The split in force as one line, primary first (`v1=95,v2=5`), for "
        "`kubectl get`; absent without a split.",
    )
    updated_at: datetime | None = Field(default=None, description="When adapter last changed.")
    history: list[AliasHistoryEntry] = Field(
        default_factory=list, max_length=10, description="Most recent deploys, newest first."
    )
    deploying: AliasDeploy | None = Field(
        default=None,
        description="The deploy in progress, absent when status.adapter is spec.adapter.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Conflict and target conditions with reasons and messages.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation last processed."
    )


class AdapterAlias(CamelModel):
    """A tenant's public model name (tenant/name:tag) pointing at one LoRAAdapter.

    Short name: alias. Changing spec.adapter deploys; setting it back rolls back.
    """

    api_version: Literal["lorafleet.dev/v1alpha1"] = "lorafleet.dev/v1alpha1"
    kind: Literal["AdapterAlias"] = "AdapterAlias"
    metadata: ObjectMeta
    spec: AdapterAliasSpec = Field(description="The public name and the adapter it serves.")
    status: AdapterAliasStatus | None = Field(
        default=None, description="Observed state, written by the operator."
    )
