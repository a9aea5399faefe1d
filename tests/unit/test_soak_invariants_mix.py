"""The soak's checks for the actions added to its mix (backfill, adoption, connection
change, namespace labels): each flags the violation it exists for, and only that.
(tests/soak/test_soak_invariants.py has the checks of the first mix.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from soak.soak_invariants import (
    Backfill,
    Observations,
    Run,
    Sampled,
    attribute_backfills,
    attribute_run_nows,
    duplicate_runs,
    foreign_writes,
    mix_verdict,
    not_recovered,
    switch_held,
    wrong_states,
)

NOW = datetime(2026, 12, 6, 3, 10, tzinfo=UTC)
SLOT = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
OBJ = ("soak-a", "soak-1")
GRACE = 60.0


def sampled(**changes: object) -> Sampled:
    state = {
        "obj": OBJ, "backend": "temporal", "cron_active": False, "schedules_running": 1,
        "ready": "True", "reason": None, "suspended": False, "deleting": False,
        "revoked_quiet_for": None,
    }  # fmt: skip
    state.update(changes)
    return Sampled(**state)  # type: ignore[arg-type]


# -- backfill: its Temporal executions carry no request; they are told by time and range


def test_a_temporal_backfill_run_is_counted_under_its_request() -> None:
    written = NOW - timedelta(minutes=1)
    backfill = Backfill(OBJ, "Backfill/soak-9", SLOT, SLOT + timedelta(minutes=2), written)
    scheduled = Run(OBJ, SLOT, "workflow/w-0300/1", started=SLOT + timedelta(seconds=1))
    again = Run(OBJ, SLOT, "workflow/w-0300/2", started=NOW)  # the backfill's run of SLOT
    later = Run(OBJ, SLOT + timedelta(minutes=1), "workflow/w-0301/2", started=NOW)
    outside = Run(OBJ, SLOT + timedelta(minutes=5), "workflow/w-0305/1", started=NOW)
    other = Run(("soak-b", "soak-1"), SLOT, "workflow/b/1", started=NOW)
    runs = attribute_backfills([scheduled, again, later, outside, other], [backfill])
    requests = {run.what: run.request for run in runs}
    assert requests == {
        "workflow/w-0300/1": None,  # started before the request was written
        "workflow/w-0300/2": "Backfill/soak-9",
        "workflow/w-0301/2": "Backfill/soak-9",
        "workflow/w-0305/1": None,  # its slot is outside the range
        "workflow/b/1": None,  # another object
    }
    # So the slot's scheduled run and its backfilled run are no duplicate...
    assert duplicate_runs(runs) == []
    # ...but the backfill running the slot twice is.
    twice = Run(OBJ, SLOT, "workflow/w-0300/3", started=NOW + timedelta(seconds=5))
    assert duplicate_runs(attribute_backfills([scheduled, again, twice], [backfill])) == [
        "soak-a/soak-1 request Backfill/soak-9 slot 2026-12-06T03:00:00+00:00: 2 runs"
    ]


def test_jobs_keep_the_request_their_annotation_names() -> None:
    written = NOW - timedelta(minutes=1)
    backfill = Backfill(OBJ, "Backfill/soak-9", SLOT, SLOT, written)
    job = Run(OBJ, SLOT, "job/x", request=None, started=NOW)  # a scheduled Job, late
    assert attribute_backfills([job], [backfill]) == [job]


# -- the states of one sample: two active, neither while Ready, revocation


def test_two_schedules_or_a_schedule_and_a_cronjob_are_both_active() -> None:
    assert wrong_states(sampled(), GRACE) == []
    assert wrong_states(sampled(cron_active=True), GRACE) == ["both"]
    # one schedule under each connection, both unpaused (a move that left the old one)
    assert wrong_states(sampled(schedules_running=2), GRACE) == ["both"]


def test_neither_while_ready_unless_suspended_or_deleting_or_not_ready() -> None:
    assert wrong_states(sampled(schedules_running=0), GRACE) == ["neither"]
    assert wrong_states(sampled(schedules_running=0, suspended=True), GRACE) == []
    assert wrong_states(sampled(schedules_running=0, deleting=True), GRACE) == []
    assert wrong_states(sampled(schedules_running=0, ready="False",
                                reason="ScheduleExists"), GRACE) == []  # fmt: skip


def test_a_revoked_object_paused_and_saying_why_is_no_violation() -> None:
    revoked = sampled(schedules_running=0, ready="False", reason="ConnectionNotAllowed",
                      revoked_quiet_for=GRACE + 30)  # fmt: skip
    assert wrong_states(revoked, GRACE) == []
    # Still running once the grace is over: the connection's rights are still used.
    running = sampled(ready="False", reason="ConnectionNotAllowed", revoked_quiet_for=GRACE + 1)
    assert wrong_states(running, GRACE) == ["revoked"]
    # Within the grace (a pass has yet to read the namespace's labels): not yet.
    assert wrong_states(sampled(revoked_quiet_for=GRACE - 1), GRACE) == []
    # Paused but Ready=True: it does not say why (2b's "neither" too).
    silent = sampled(schedules_running=0, revoked=True, revoked_quiet_for=GRACE + 1)
    assert wrong_states(silent, GRACE) == ["neither", "revoked"]
    # A kubernetes-backed object has nothing to revoke.
    assert wrong_states(sampled(backend="kubernetes", cron_active=True, schedules_running=0,
                                revoked_quiet_for=GRACE + 1), GRACE) == []  # fmt: skip


# -- the end: recovered, revoked objects paused and saying why


def status(ready: str, reason: str | None = None, generation: int = 3) -> dict[str, object]:
    condition = {"type": "Ready", "status": ready, **({"reason": reason} if reason else {})}
    return {"observedGeneration": generation, "conditions": [condition]}


def test_recovered_means_ready_or_a_reason_and_revoked_means_paused_and_saying_so() -> None:
    assert not_recovered(OBJ, 3, status("True"), "temporal", False, 1) is None
    assert not_recovered(OBJ, 3, status("False", "CronJobExists"), "kubernetes", False, 0) is None
    assert "generation" in (not_recovered(OBJ, 4, status("True"), "temporal", False, 1) or "")
    assert "Ready" in (not_recovered(OBJ, 3, status("False", "InternalError"), "temporal",
                                     False, 0) or "")  # fmt: skip
    paused = status("False", "ConnectionNotAllowed")
    assert not_recovered(OBJ, 3, paused, "temporal", True, 0) is None
    assert "still runs" in (not_recovered(OBJ, 3, paused, "temporal", True, 1) or "")
    assert "revoked" in (not_recovered(OBJ, 3, status("True"), "temporal", True, 0) or "")
    assert not_recovered(OBJ, 3, status("True"), "kubernetes", True, 0) is None


# -- adoption: nothing Sundial neither owns nor adopted is written


URI = "/apis/batch/v1/namespaces/soak-a/cronjobs/x"


def audit(
    verb: str, name: str, user: str = "sundial-soak", code: int = 200, uri: str = URI
) -> dict[str, object]:
    return {
        "verb": verb, "user": {"username": user}, "requestURI": uri,
        "objectRef": {"resource": "cronjobs", "namespace": "soak-a", "name": name},
        "responseStatus": {"code": code},
    }  # fmt: skip


def test_a_write_by_the_operator_to_a_foreign_cronjob_is_flagged() -> None:
    foreign = {("soak-a", "theirs")}
    events = [
        audit("create", "theirs", user="admin"),  # the soak made it
        audit("patch", "soak-3"),  # Sundial's own CronJob
        audit("get", "theirs"),  # a read
        audit("patch", "theirs", uri="/apis/batch/v1/namespaces/soak-a/cronjobs/theirs"
                                     "?dryRun=All&fieldManager=sundial"),  # nothing written
        audit("delete", "theirs", code=403),  # refused
    ]  # fmt: skip
    assert foreign_writes(events, "sundial-soak", foreign) == []
    events.append(audit("patch", "theirs"))
    assert foreign_writes(events, "sundial-soak", foreign) == [
        "sundial-soak patch cronjobs soak-a/theirs (200)"
    ]


def test_the_mix_verdict_names_its_invariants_and_is_clean_only_when_they_hold() -> None:
    assert mix_verdict(Observations(), 4) == {
        "6 a revoked connection's schedules paused, Ready says why": [],
        "7 nothing foreign touched": [],
    }
    observed = Observations(
        revoked_running=[(float(t), OBJ) for t in range(10, 16)],
        foreign_touched=["sundial-soak delete cronjobs soak-a/theirs (200)"],
    )
    found = mix_verdict(observed, 4)
    assert found["6 a revoked connection's schedules paused, Ready says why"] == [
        "soak-a/soak-1 from 10 to 14"
    ]
    assert found["7 nothing foreign touched"] == [
        "sundial-soak delete cronjobs soak-a/theirs (200)"
    ]


def test_the_forbid_hold_across_a_switch_is_not_neither_but_only_while_a_job_runs() -> None:
    # Switched from kubernetes under Forbid: the new schedule stays paused (the switch's
    # note) while a Job the CronJob started still runs (without a node: for ever).
    held = sampled(schedules_running=0, held=True)
    assert wrong_states(held, GRACE) == []
    assert wrong_states(sampled(schedules_running=0, held=False), GRACE) == ["neither"]


def test_temporal_triggers_are_matched_to_distinct_earlier_run_now_requests() -> None:
    # Two run-now requests acted on within one second: Temporal names both runs by the
    # second (one slot, one workflow id); each is its own request's run, not a duplicate.
    first, second = NOW, NOW + timedelta(seconds=1)
    slot = NOW + timedelta(seconds=1, microseconds=0)
    runs = [
        Run(OBJ, SLOT, "workflow/w-0300/1", started=SLOT),  # scheduled: on the minute
        Run(OBJ, slot.replace(second=5), "workflow/t/1", started=second + timedelta(seconds=4)),
        Run(OBJ, slot.replace(second=5), "workflow/t/2", started=second + timedelta(seconds=4)),
        Run(OBJ, SLOT, "job/r1", request="RunNow/soak-3"),  # the kubernetes backend's
    ]
    requests = [(OBJ, "RunNow/soak-1", first), (OBJ, "RunNow/soak-2", second),
                (OBJ, "RunNow/soak-3", first)]  # fmt: skip
    attributed, problems = attribute_run_nows(runs, requests)
    assert problems == []
    assert sorted(str(r.request) for r in attributed) == [
        "None",
        "RunNow/soak-1",
        "RunNow/soak-2",
        "RunNow/soak-3",
    ]
    assert duplicate_runs(attributed) == []
    # A third trigger with no request left for it: a request acted on twice.
    extra = Run(OBJ, slot.replace(second=9), "workflow/t/3", started=second + timedelta(seconds=8))
    _, problems = attribute_run_nows([*runs, extra], requests)
    assert problems == [
        "soak-a/soak-1 run workflow/t/3 (slot 2026-12-06T03:10:09+00:00): a run now with no "
        "request of its own"
    ]
    # A trigger before any request was written is none of the soak's requests either.
    early = Run(OBJ, NOW.replace(second=30) - timedelta(minutes=5), "workflow/t/0",
                started=NOW - timedelta(minutes=5))  # fmt: skip
    assert len(attribute_run_nows([early], requests)[1]) == 1


# -- a run now acted on after a fault: Temporal's trigger may fall exactly on a minute


RUN_NOW_SLOT = datetime(2026, 12, 6, 5, 32, tzinfo=UTC)


def test_a_run_now_trigger_on_a_minute_slot_is_its_request_not_a_second_scheduled_run() -> None:
    # A run now written during a fault (05:31:54.992), acted on after it: Temporal's
    # trigger got the nominal time 05:32:00, the slot's scheduled run too.
    written = datetime(2026, 12, 6, 5, 31, 54, 992000, tzinfo=UTC)
    scheduled = Run(OBJ, RUN_NOW_SLOT, "workflow/s/1", started=RUN_NOW_SLOT)
    trigger = Run(OBJ, RUN_NOW_SLOT, "workflow/t/1",
                  started=RUN_NOW_SLOT + timedelta(milliseconds=400))  # fmt: skip
    requests = [(OBJ, "RunNow/soak-18", written)]
    attributed, problems = attribute_run_nows([scheduled, trigger], requests)
    assert problems == []
    assert duplicate_runs(attributed) == []
    assert sorted(str(run.request) for run in attributed) == ["None", "RunNow/soak-18"]
    # One run on the slot with a request waiting: the scheduled run stays the slot's.
    alone, _ = attribute_run_nows([scheduled], requests)
    assert [run.request for run in alone] == [None]


def test_two_runs_on_a_minute_slot_are_still_a_duplicate_without_a_fitting_request() -> None:
    written = datetime(2026, 12, 6, 5, 31, 54, tzinfo=UTC)
    runs = [
        Run(OBJ, RUN_NOW_SLOT, "workflow/s/1", started=RUN_NOW_SLOT),
        Run(OBJ, RUN_NOW_SLOT, "workflow/s/2", started=RUN_NOW_SLOT + timedelta(seconds=1)),
    ]
    twice = ["soak-a/soak-1 slot 2026-12-06T05:32:00+00:00: 2 runs"]

    def judged(requests: list[tuple[tuple[str, str], str, datetime]]) -> list[str]:
        attributed, _ = attribute_run_nows(runs, requests)
        return duplicate_runs(attributed)

    assert judged([]) == twice  # nobody asked
    assert judged([(("soak-b", "soak-1"), "RunNow/soak-3", written)]) == twice  # another object
    # Written after both runs started: neither is its run.
    assert judged([(OBJ, "RunNow/soak-3", RUN_NOW_SLOT + timedelta(seconds=2))]) == twice
    # Written long before (beyond a run now's handling delay): not this slot's run.
    assert judged([(OBJ, "RunNow/soak-3", RUN_NOW_SLOT - timedelta(minutes=5))]) == twice
    # Already run by a Job carrying its label.
    job = Run(OBJ, RUN_NOW_SLOT, "job/r", request="RunNow/soak-3")
    attributed, _ = attribute_run_nows([*runs, job], [(OBJ, "RunNow/soak-3", written)])
    assert duplicate_runs(attributed) == twice
    # Already run by a trigger off the minute.
    off = Run(OBJ, RUN_NOW_SLOT.replace(second=57) - timedelta(minutes=1), "workflow/t/1",
              started=RUN_NOW_SLOT - timedelta(seconds=3))  # fmt: skip
    attributed, problems = attribute_run_nows([*runs, off], [(OBJ, "RunNow/soak-3", written)])
    assert problems == []
    assert duplicate_runs(attributed) == twice
    # Three runs and one fitting request: two are still the slot's.
    third = Run(OBJ, RUN_NOW_SLOT, "workflow/s/3", started=RUN_NOW_SLOT + timedelta(seconds=2))
    attributed, _ = attribute_run_nows([*runs, third], [(OBJ, "RunNow/soak-3", written)])
    assert duplicate_runs(attributed) == twice


# -- the Forbid hold across a switch, released by a pass after the Job ends


def at(clock: str) -> datetime:
    hour, minute, second = (float(part) for part in clock.split(":"))
    return datetime(2026, 12, 6, int(hour), int(minute), tzinfo=UTC) + timedelta(seconds=second)


def held(
    now: str,
    ends: list[str | None],
    faults: tuple[tuple[str, str | None], ...] = (),
    note: bool = True,
    forbid: bool = True,
) -> bool:
    return switch_held(
        note, forbid, [at(end) if end else None for end in ends],
        [(at(start), at(end) if end else None) for start, end in faults], at(now), 4.0,
    )  # fmt: skip


def test_the_switch_hold_lasts_while_a_job_runs_and_one_pass_after_it_ends() -> None:
    assert held("05:31:50", [None])  # a Job not ended
    assert held("05:31:50", ["05:30:00", None])
    assert not held("05:31:50", [None], note=False)  # not the switch's pause
    assert not held("05:31:50", [None], forbid=False)
    assert not held("05:31:50", [])  # no Job of the object
    # Ended: the release needs a pass of the operator, PERSIST_SECONDS.
    assert held("05:31:50", ["05:31:47"])
    assert not held("05:31:52", ["05:31:47"])


def test_an_apiserver_fault_right_after_the_job_ended_extends_the_hold() -> None:
    # The report's case: the Job ended (whole seconds on the apiserver) as a 429 fault
    # began (05:31:47.317-05:31:57.097); the pass could write only after it.
    fault = (("05:31:47.317", "05:31:57.097"),)
    for now in ("05:31:47.97", "05:31:52.1", "05:31:57.26", "05:31:59.32", "05:32:01"):
        assert held(now, ["05:31:47"], fault), now
    assert not held("05:32:01.2", ["05:31:47"], fault)  # a pass had its 4 s
    assert held("05:32:30", ["05:31:47"], (("05:31:48", None),))  # still in force
    assert held("05:31:53", ["05:31:50"], (("05:31:45", "05:31:52"),))  # ended within one
    # A chain: a second fault starting before the first one's pass had its time.
    chain = (("05:31:48", "05:31:50"), ("05:31:53", "05:31:58"))
    assert held("05:32:01", ["05:31:47"], chain)
    # A fault that began well after the release was due holds nothing.
    assert not held("05:31:58", ["05:31:47"], (("05:31:55", "05:32:05"),))
    # A fault long over before the Job ended holds nothing either.
    assert not held("05:31:58", ["05:31:47"], (("05:31:30", "05:31:40"),))
    # Not the switch's pause, or not Forbid: no hold, fault or not.
    assert not held("05:31:52", ["05:31:47"], fault, note=False)
    assert not held("05:31:52", ["05:31:47"], fault, forbid=False)


def test_a_revocation_under_a_status_write_fault_is_not_neither_until_the_grace() -> None:
    """The long soak's case (seed 1765007000): the namespace unlabelled while status writes
    were refused; the operator paused the schedule at once, its Ready=False was refused, so
    a stale Ready=True stood beside the paused schedule until the fault ended."""
    during_fault = sampled(schedules_running=0, revoked=True, revoked_quiet_for=None)
    assert wrong_states(during_fault, GRACE) == []
    just_quiet = sampled(schedules_running=0, revoked=True, revoked_quiet_for=GRACE - 1)
    assert wrong_states(just_quiet, GRACE) == []
    # Not revoked: paused under Ready=True is "neither", fault or not.
    assert wrong_states(sampled(schedules_running=0, revoked_quiet_for=None), GRACE) == ["neither"]
