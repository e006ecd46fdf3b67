"""The names of an order's Secrets: no two orders in a namespace can get one name.

Each is the order's name plus a suffix. Two such names are one exactly when one order's
name is the other's plus the difference of the suffixes, so the rule is that no suffix
ends another: `{order}-custom-tls` broke it (`{order}-custom`'s cert-manager Secret),
and cert-manager and the copy fought over one Secret."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fsm import identity

SECRET_NAMES = (
    identity.auth_secret_name,
    identity.tls_secret_name,
    identity.custom_tls_secret_name,
)
# An order's name: a DNS label (the Service named after it must be one).
ORDER_NAME = st.from_regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


def _suffix(name_of: object) -> str:
    return name_of("o")[1:]  # type: ignore[operator]


def test_no_suffix_ends_another() -> None:
    suffixes = [_suffix(f) for f in SECRET_NAMES]
    for a in suffixes:
        for b in suffixes:
            assert a == b or not b.endswith(a), (a, b)


@given(ORDER_NAME, ORDER_NAME, st.sampled_from(SECRET_NAMES), st.sampled_from(SECRET_NAMES))
def test_two_orders_secrets_never_share_a_name(first, second, name_a, name_b) -> None:
    if (first, name_a) != (second, name_b):
        assert name_a(first) != name_b(second)


def test_the_collision_that_was() -> None:
    # The copy of order `a` and the cert-manager Secret of order `a-custom`.
    assert identity.custom_tls_secret_name("a") != identity.tls_secret_name("a-custom")
