"""Sundial's errors, in one home: the two a pass raises (Retry: transient, retried with
backoff; SpecProblem: only a change to the spec, or to what it names, can fix it), Temporal's
two (TemporalUnavailable is a Retry; TemporalRejected, a refusal of the request itself, the
temporal backend turns into a SpecProblem or a Retry), and the one translation of the
apiserver's refusals into them, which keeps the refusal's reason (a 403 is Forbidden, not
BackendUnavailable) wherever it happens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sundial.api import reasons
from sundial.kube import ApiException, api_error_message

if TYPE_CHECKING:
    from sundial.backends.protocol import Outcome


class Retry(Exception):
    """An expected, transient failure (an API server or Temporal briefly unavailable, a
    write refused for now): its message says enough, so it is logged without a traceback.
    `reason` is what the Ready condition says meanwhile."""

    def __init__(self, message: str, reason: str = reasons.BACKEND_UNAVAILABLE) -> None:
        super().__init__(message)
        self.reason = reason


class SpecProblem(Exception):
    """Only a change to the spec (or to a Secret it names) can fix this. `observed`: what
    the backend in place was seen to do in the same pass (a schedule paused because its
    connection was taken away), for the status beside the problem."""

    def __init__(
        self,
        reason: str,
        message: str,
        retry_after: float | None = None,
        *,
        observed: Outcome | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.observed = observed


class TemporalUnavailable(Retry):
    """Temporal could not be reached (retried, BackendUnavailable meanwhile); the message
    names the address, never a credential."""


class TemporalRejected(Exception):
    """Temporal refused the request itself (INVALID_ARGUMENT and the like, or the
    credentials): a spec or connection problem. `reason` is the Ready reason."""

    def __init__(self, message: str, reason: str = reasons.TEMPORAL_REJECTED) -> None:
        super().__init__(message)
        self.reason = reason


def refusal_reason(error: ApiException) -> str:
    """The Ready reason for a request the apiserver refused for now (RBAC, a quota, an
    admission webhook or policy: 403; credentials: 401), else it was unavailable."""
    return {401: reasons.UNAUTHORIZED, 403: reasons.FORBIDDEN}.get(
        error.status or 0, reasons.BACKEND_UNAVAILABLE
    )


def api_retry(error: ApiException, doing: str) -> Retry:
    """A failed apiserver request, retried: "<doing>: <the server's message>", with the
    refusal's reason."""
    return Retry(f"{doing}: {api_error_message(error)}", refusal_reason(error))
