"""`adapter_registration.problems` refuses names that are not DNS subdomains, whole-string."""

from __future__ import annotations

import pytest

from lorafleet_core.planning.adapter_registration import problems


@pytest.mark.parametrize("name", ["abc\n", "Abc", "-abc", "a" * 254, ""])
def test_a_name_that_is_not_a_dns_subdomain_is_refused(name: str) -> None:
    # "abc\n" once passed: re.match's `$` also matches before a trailing newline.
    found = problems({"metadata": {"name": name}, "spec": {}}, [])
    assert any("is not a DNS subdomain" in p for p in found), found


def test_a_dns_subdomain_name_raises_no_name_problem() -> None:
    found = problems({"metadata": {"name": "acme-support.v2"}, "spec": {}}, [])
    assert not any("is not a DNS subdomain" in p for p in found), found
