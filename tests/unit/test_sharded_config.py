"""SUNDIAL_SHARDS at start-up: sharded mode replaces leader election, said at once."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sundial.config import OperatorConfig


def test_sharded_mode_and_leader_election_together_are_refused_naming_both() -> None:
    with pytest.raises(ValidationError) as refused:
        OperatorConfig.from_env({"SUNDIAL_SHARDS": "4", "SUNDIAL_LEADER_ELECTION": "true"})
    assert "SUNDIAL_SHARDS" in str(refused.value)
    assert "SUNDIAL_LEADER_ELECTION" in str(refused.value)


@pytest.mark.parametrize("shards", ["0", "-1", "1025"])
def test_a_shard_count_out_of_range_is_refused(shards: str) -> None:
    with pytest.raises(ValidationError, match="shards"):
        OperatorConfig.from_env({"SUNDIAL_SHARDS": shards})


def test_sharded_mode_alone_is_taken() -> None:
    assert OperatorConfig.from_env({"SUNDIAL_SHARDS": "4"}).shards == 4
    assert OperatorConfig.from_env({}).shards == 1
