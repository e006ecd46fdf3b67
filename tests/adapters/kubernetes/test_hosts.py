"""hosts.host_label: readable for ordinary names, never shared by two (namespace, name).

The table pins the forms; the property draws names from a tiny alphabet full of `-`, so
concatenations that look alike are common, and checks that distinct pairs never meet.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workload_samples import ORDER, SETTINGS, policy

from adapters.kubernetes import hosts, rendering
from adapters.kubernetes.rendering import OrderRef

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("name", "namespace", "expected"),
    [
        pytest.param("support-llm", "support", "support-llm-support", id="ordinary-stays-plain"),
        pytest.param("chat", "prod", "chat-prod", id="no-hyphens"),
        pytest.param("support", "llm-support", "support-llm-support--", id="hyphenated-ns-hashed"),
        pytest.param("a" * 61, "ns", "a" * 51 + "--", id="too-long-hashed"),
    ],
)
def test_forms(name: str, namespace: str, expected: str) -> None:
    label = hosts.host_label(name, namespace)
    if expected.endswith("--"):
        assert label.startswith(expected)
        assert len(label) == len(expected) + hosts.DIGEST_LENGTH
    else:
        assert label == expected
    assert len(label) <= hosts.LABEL_LIMIT
    assert _DNS_LABEL.match(label), label


def test_the_issue_pair_gets_two_hosts() -> None:
    first = OrderRef(namespace="support", name="support-llm", uid="u1", generation=1)
    second = OrderRef(namespace="llm-support", name="support", uid="u2", generation=1)
    hosts_seen = {
        rendering.endpoint_url(first, policy(), SETTINGS),
        rendering.endpoint_url(second, policy(), SETTINGS),
    }
    assert hosts_seen == {
        "https://support-llm-support.example.com",
        f"https://support-llm-support--{hosts.host_label('support', 'llm-support')[-10:]}"
        ".example.com",
    }


def test_the_sample_order_keeps_its_documented_host() -> None:
    assert rendering.public_host(ORDER, SETTINGS) == "support-llm-support.example.com"


_WORD = st.text(alphabet="ab", min_size=1, max_size=3)
_JOINED = st.lists(_WORD, min_size=2, max_size=30).map("-".join)


def _valid(part: str) -> bool:
    return bool(part) and not part.startswith("-") and not part.endswith("-")


@settings(max_examples=300)
@given(_JOINED)
def test_every_split_of_a_concatenation_gets_its_own_host(joined: str) -> None:
    # Every way to cut `joined` at a `-` into (name, namespace) is a pair a tenant could
    # create; the old `<name>-<namespace>` gave them all one host.
    pairs = [
        (joined[:i], joined[i + 1 :])
        for i, ch in enumerate(joined)
        if ch == "-" and _valid(joined[:i]) and _valid(joined[i + 1 :])
    ]
    seen = {
        rendering.public_host(OrderRef(name=name, namespace=ns, uid="u"), SETTINGS)
        for name, ns in pairs
    }
    assert len(seen) == len(pairs)
    assert all(len(host.partition(".")[0]) <= hosts.LABEL_LIMIT for host in seen)
