"""The soak's checks can fail: each flags the violation it exists for, and only that."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from soak_invariants import Observations, Run, duplicate_runs, false_misses, persistent, verdict

SLOT = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
OBJ = ("soak-a", "soak-1")


def test_two_runs_of_one_slot_or_one_request_slot_are_duplicates() -> None:
    runs = [
        Run(OBJ, SLOT, "job/a"),
        Run(OBJ, SLOT + timedelta(minutes=1), "job/b"),
        Run(OBJ, SLOT, "workflow/x/1"),  # the same slot on the other backend
        Run(OBJ, SLOT, "job/r1", request="RunNow/one"),
        Run(OBJ, SLOT, "job/r2", request="RunNow/two"),  # another request: fine
    ]
    assert duplicate_runs(runs) == ["soak-a/soak-1 slot 2026-12-06T03:00:00+00:00: 2 runs"]
    runs.append(Run(OBJ, SLOT, "job/r3", request="RunNow/one"))
    assert len(duplicate_runs(runs)) == 2


def test_a_wrong_state_counts_only_when_it_lasts() -> None:
    race = [(10.0, OBJ), (11.0, OBJ)]  # two samples: 1 s
    assert persistent(race, seconds=4) == []
    lasting = [(10.0, OBJ), (11.0, OBJ), (12.0, OBJ), (13.0, OBJ), (14.0, OBJ)]
    assert persistent(lasting, seconds=4) == ["soak-a/soak-1 from 10 to 14"]
    gaps = [(10.0, OBJ), (11.0, OBJ), (20.0, OBJ), (21.0, OBJ)]  # two short episodes
    assert persistent(gaps, seconds=4) == []


def test_a_miss_reported_for_a_slot_that_ran_is_false() -> None:
    observed = Observations(
        runs={"job/a": Run(OBJ, SLOT, "job/a")},
        reported_misses={(OBJ, SLOT, "ControllerDown"),
                         (OBJ, SLOT + timedelta(minutes=1), "ControllerDown")},
    )  # fmt: skip
    assert false_misses(observed) == [
        "soak-a/soak-1 slot 2026-12-06T03:00:00+00:00 reported ControllerDown but it ran"
    ]


def test_the_verdict_names_every_invariant_and_is_clean_only_when_all_hold() -> None:
    assert not any(verdict(Observations(), 4).values())
    broken = Observations(left_behind=["soak-a/cronjob/x"], not_recovered=["operator"])
    found = verdict(broken, 4)
    assert found["4 nothing left after deletion"] == ["soak-a/cronjob/x"]
    assert found["5 recovered within 60 s of the last fault"] == ["operator"]
    assert len(found) == 6
