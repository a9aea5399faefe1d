from __future__ import annotations

import pytest

from sundial.planning.selector import SelectorError, parse_selector


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {"a": "1"}, True),
        ("sundial.dev/shard=ha", {"sundial.dev/shard": "ha"}, True),
        ("sundial.dev/shard==ha", {"sundial.dev/shard": "other"}, False),
        ("sundial.dev/shard=ha", {}, False),
        ("!sundial.dev/shard", {}, True),
        ("!sundial.dev/shard", {"sundial.dev/shard": "ha"}, False),
        ("team", {"team": ""}, True),
        ("team!=a", {}, True),
        ("team!=a", {"team": "a"}, False),
        ("team=a, tier=web", {"team": "a", "tier": "web"}, True),
        ("team=a,tier=web", {"team": "a"}, False),
        ("empty=", {"empty": ""}, True),
    ],
)
def test_selector_matches_as_the_apiserver_does(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse_selector(selector).matches(labels) is expected


@pytest.mark.parametrize("bad", ["team in (a,b)", "!team=a", "=a", "a=b=c"])
def test_unsupported_selectors_are_refused_with_the_reason(bad: str) -> None:
    with pytest.raises(SelectorError, match="label selector"):
        parse_selector(bad)
