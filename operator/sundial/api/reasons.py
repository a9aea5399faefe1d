"""Condition types and reasons: part of the API (kubectl, Argo CD's health.lua, alerts and
scripts match on them), so each is named once, here. Code, the CRD's description of
`conditions`, health.lua's testdata and the tests refer to these names."""

from __future__ import annotations

from typing import Final

# ---- condition types ----------------------------------------------------------------
READY: Final = "Ready"
RUNS_MISSED: Final = "RunsMissed"
RUNS_FAILING: Final = "RunsFailing"
RUN_TOO_LONG: Final = "RunTooLong"
SWITCHING: Final = "Switching"
CONDITION_TYPES: Final = (READY, RUNS_MISSED, RUNS_FAILING, RUN_TOO_LONG, SWITCHING)

# ---- Ready ---------------------------------------------------------------------------
# True: the backend is in step with the spec.
RECONCILED: Final = "Reconciled"
PAUSED_IN_TEMPORAL: Final = "PausedInTemporal"
# True, but nothing runs: failurePolicy.pauseAfter consecutive runs failed (status.pause).
PAUSED_BY_FAILURE_POLICY: Final = "PausedByFailurePolicy"
# Unknown: Sundial cannot tell (a server it needs did not answer); retried with backoff.
BACKEND_UNAVAILABLE: Final = "BackendUnavailable"
# False, refused for now (retried): the apiserver said no to Sundial's own rights.
FORBIDDEN: Final = "Forbidden"
UNAUTHORIZED: Final = "Unauthorized"
INTERNAL_ERROR: Final = "InternalError"
# False, until the spec (or a resource it names) changes.
INVALID_SPEC: Final = "InvalidSpec"
INVALID_SCHEDULE: Final = "InvalidSchedule"
INVALID_TIME_ZONE: Final = "InvalidTimeZone"
INVALID_DURATION: Final = "InvalidDuration"
INVALID_JOB_TEMPLATE: Final = "InvalidJobTemplate"
CRONJOB_EXISTS: Final = "CronJobExists"
SCHEDULE_EXISTS: Final = "ScheduleExists"
SCHEDULE_UNREACHABLE: Final = "ScheduleUnreachable"
CONNECTION_NOT_FOUND: Final = "ConnectionNotFound"
CONNECTION_NOT_ALLOWED: Final = "ConnectionNotAllowed"
INVALID_CONNECTION: Final = "InvalidConnection"
INVALID_SECRET: Final = "InvalidSecret"
SECRET_NOT_FOUND: Final = "SecretNotFound"
# False: Temporal refused the request itself, or the connection's credentials.
TEMPORAL_REJECTED: Final = "TemporalRejected"
UNAUTHENTICATED: Final = "Unauthenticated"
PERMISSION_DENIED: Final = "PermissionDenied"
TLS_HANDSHAKE_FAILED: Final = "TLSHandshakeFailed"
READY_REASONS: Final = frozenset({
    RECONCILED, PAUSED_IN_TEMPORAL, PAUSED_BY_FAILURE_POLICY, BACKEND_UNAVAILABLE,
    FORBIDDEN, UNAUTHORIZED, INTERNAL_ERROR, INVALID_SPEC, INVALID_SCHEDULE, INVALID_TIME_ZONE,
    INVALID_DURATION,
    INVALID_JOB_TEMPLATE, CRONJOB_EXISTS, SCHEDULE_EXISTS, SCHEDULE_UNREACHABLE,
    CONNECTION_NOT_FOUND, CONNECTION_NOT_ALLOWED, INVALID_CONNECTION, INVALID_SECRET,
    SECRET_NOT_FOUND, TEMPORAL_REJECTED, UNAUTHENTICATED, PERMISSION_DENIED,
    TLS_HANDSHAKE_FAILED,
})  # fmt: skip

# ---- RunsMissed ------------------------------------------------------------------------
NO_MISSED_RUNS: Final = "NoMissedRuns"
RAN_ON_TIME: Final = "RanOnTime"
# True: the newest miss's own reason (missed.py's MissReason: ControllerDown, ...).

# ---- RunsFailing -----------------------------------------------------------------------
NO_FAILURES: Final = "NoFailures"
CONSECUTIVE_FAILURES: Final = "ConsecutiveFailures"
BELOW_THRESHOLD: Final = "BelowThreshold"
RECOVERED: Final = "Recovered"

# ---- RunTooLong ------------------------------------------------------------------------
WITHIN_MAX_RUN_DURATION: Final = "WithinMaxRunDuration"
RUNNING_TOO_LONG: Final = "RunningTooLong"
LAST_RUN_TOO_LONG: Final = "LastRunTooLong"

# ---- Switching -------------------------------------------------------------------------
SWITCH_PENDING: Final = "SwitchPending"
WAITING_FOR_RUNNING_JOB: Final = "WaitingForRunningJob"
SWITCHED: Final = "Switched"

CONDITION_REASONS: Final = READY_REASONS | {
    NO_MISSED_RUNS, RAN_ON_TIME, NO_FAILURES, CONSECUTIVE_FAILURES, BELOW_THRESHOLD, RECOVERED,
    WITHIN_MAX_RUN_DURATION, RUNNING_TOO_LONG, LAST_RUN_TOO_LONG, SWITCH_PENDING,
    WAITING_FOR_RUNNING_JOB, SWITCHED,
}  # fmt: skip

# ---- A run's own reason (recentRuns[].reason), beside the Job's or the workflow's -------
# The run outlived spec.maxRunDuration (result TimedOut).
MAX_RUN_DURATION_EXCEEDED: Final = "MaxRunDurationExceeded"
# Its Job went before any pass saw it end (result Unknown: never guessed).
NOT_OBSERVED: Final = "NotObserved"
# A job on temporal's run that Temporal started and no worker took up within
# monitoring.startGrace (no Job made for it): is `sundial worker` running, serving its
# connection?
WORKER_UNAVAILABLE: Final = "WorkerUnavailable"
RUN_REASONS: Final = frozenset({MAX_RUN_DURATION_EXCEEDED, NOT_OBSERVED, WORKER_UNAVAILABLE})
