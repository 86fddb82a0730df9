from __future__ import annotations

from decimal import Decimal

import pytest

from fleet.api.quantity import QuantityError, canonical, format_canonical, parse_quantity


@pytest.mark.parametrize(("text", "value"), [
    ("500m", Decimal("0.5")), ("2Gi", Decimal(2 * 2**30)), ("1", Decimal(1)), (3, Decimal(3)),
    ("1e3", Decimal(1000)), ("100M", Decimal(10**8)), ("1E", Decimal(10**18)),
    ("10000000000", Decimal(10**10)), ("0.5", Decimal("0.5")), ("1k", Decimal(1000)),
    ("1Ki", Decimal(1024)), ("+2", Decimal(2)),
])
def test_parses_kubernetes_quantities(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5 Gi", "1GB", "--1", "Gi"])
def test_rejects_what_is_not_a_quantity(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_canonical_units_round_up() -> None:
    assert canonical("cpu", "500m") == 500
    assert canonical("cpu", "0.0001") == 1
    assert canonical("cpu", 2) == 2000
    assert canonical("memory", "1Gi") == 2**30
    assert canonical("nvidia.com/gpu", "1") == 1
    assert format_canonical("cpu", 1500) == "1500m"
    assert format_canonical("cpu", 2000) == "2"
    assert format_canonical("memory", 2 * 2**30) == "2Gi"


AGREED = ["500m", "2Gi", "1.5", "1e3", "1E3", "100n", "3u", "1k", "1M", "0.1Ki", ".5", "+1",
          "-1", "1.0e-3", "12345678901234567890Ei", "1m", "7Ti", "1.", "1e+3", 2, 0.5]


@pytest.mark.parametrize("text", AGREED)
def test_agrees_exactly_with_the_kubernetes_client(text: str | int | float) -> None:
    from kubernetes.utils import parse_quantity as client_parse

    assert parse_quantity(text) == client_parse(text)


@pytest.mark.parametrize("text", ["1e-3m", "1_000"])
def test_refuses_what_only_the_laxer_client_parser_takes(text: str) -> None:
    from kubernetes.utils import parse_quantity as client_parse

    client_parse(text)  # accepted there, refused by the API server's pattern and here
    with pytest.raises(QuantityError):
        parse_quantity(text)
