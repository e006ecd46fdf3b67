"""hosts.host_label: readable for ordinary names, never shared by two (namespace, name).

The table pins the forms; the property draws names from a tiny alphabet full of `-`, so
concatenations that look alike are common, and checks that distinct pairs never meet,
also when the template's own text shares `%s`'s DNS label (`%s-kube.example.com`).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workload_samples import ORDER, SETTINGS, policy

from adapters.kubernetes import hosts, rendering
from adapters.kubernetes.rendering import OrderRef
from adapters.kubernetes.settings import Settings, SettingsError

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


# Templates the platform's schema admits, with text beside `%s` in its label.
TEMPLATES = ["%s.example.com", "%s-kube.example.com", "ai-%s.example.com", "x-%s-y.corp"]
LONGEST_NAME = "a" + "b" * 62  # a DNS-1035 label, as the CRD allows an order's name


def _first_label(host: str) -> str:
    return host.partition(".")[0]


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize(
    ("name", "namespace"),
    [("a" + "b" * 55, "support"), (LONGEST_NAME, "ns"), (LONGEST_NAME, "x" * 63), ("c", "d-e")],
    ids=["56-char-name", "63-char-name", "63-char-both", "short-hashed"],
)
def test_the_host_label_fits_whatever_text_shares_it(
    template: str, name: str, namespace: str
) -> None:
    settings = Settings(public_domain_template=template)
    host = rendering.public_host(OrderRef(name=name, namespace=namespace, uid="u"), settings)
    assert host is not None
    label = _first_label(host)
    assert len(label) <= hosts.LABEL_LIMIT, host
    assert _DNS_LABEL.match(label), host
    assert host.endswith(template.partition("%s")[2])


def test_a_label_that_fits_is_left_alone() -> None:
    settings = Settings(public_domain_template="%s-kube.example.com")
    assert rendering.public_host(ORDER, settings) == "support-llm-support-kube.example.com"


@pytest.mark.parametrize(
    "template", ["%s-" + "k" * 50 + ".example.com", "a" * 30 + "%s" + "b" * 25 + ".corp"]
)
def test_a_template_leaving_no_room_for_the_name_is_refused(template: str) -> None:
    with pytest.raises(SettingsError, match="DNS label"):
        Settings.from_settings({"publicDomainTemplate": template})


_NAME = st.from_regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
_NAMESPACE = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


@settings(max_examples=300)
@given(_NAME, _NAMESPACE, st.integers(hosts.SHORTEST_ROOM, hosts.LABEL_LIMIT))
def test_a_label_fits_any_room_a_template_may_leave(name: str, namespace: str, room: int) -> None:
    label = hosts.host_label(name, namespace, room)
    assert len(label) <= room and _DNS_LABEL.match(label), label


_WORD = st.text(alphabet="ab", min_size=1, max_size=3)
_JOINED = st.lists(_WORD, min_size=2, max_size=30).map("-".join)


def _valid(part: str) -> bool:
    return bool(part) and not part.startswith("-") and not part.endswith("-")


@settings(max_examples=300)
@given(_JOINED, st.sampled_from(TEMPLATES))
def test_every_split_of_a_concatenation_gets_its_own_host(joined: str, template: str) -> None:
    # Every way to cut `joined` at a `-` into (name, namespace) is a pair a tenant could
    # create; the old `<name>-<namespace>` gave them all one host.
    pairs = [
        (joined[:i], joined[i + 1 :])
        for i, ch in enumerate(joined)
        if ch == "-" and _valid(joined[:i]) and _valid(joined[i + 1 :])
    ]
    in_force = Settings(public_domain_template=template)
    seen = {
        rendering.public_host(OrderRef(name=name, namespace=ns, uid="u"), in_force)
        for name, ns in pairs
    }
    assert len(seen) == len(pairs)
    assert all(len(_first_label(host or "")) <= hosts.LABEL_LIMIT for host in seen)
