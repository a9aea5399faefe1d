"""What Temporal's errors mean for a pass: which gRPC statuses are an outage (retried) and
which a refusal of the connection's credentials or TLS (only a corrected Secret helps),
read from the SDK's errors, with the server's own words kept for the message."""

from __future__ import annotations

from temporalio.service import RPCStatusCode

from sundial.api import reasons
from sundial.errors import TemporalRejected

UNAVAILABLE = {
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.INTERNAL,
}


# The credentials were refused: the connection's Secret, not the ScheduledJob, is wrong.
REFUSED_CREDENTIALS = {
    RPCStatusCode.UNAUTHENTICATED: reasons.UNAUTHENTICATED,
    RPCStatusCode.PERMISSION_DENIED: reasons.PERMISSION_DENIED,
}


def credentials_refused(where: str, why: str, reason: str) -> TemporalRejected:
    return TemporalRejected(
        f"Temporal at {where} refused the connection's credentials: {why}",
        reason,
    )


# The gRPC status as the SDK's core writes it (tonic's code names) -> the Ready reason.
REFUSED_AT_CONNECT = {
    "code: Unauthenticated": reasons.UNAUTHENTICATED,
    "code: PermissionDenied": reasons.PERMISSION_DENIED,
}


def refusal_message(text: str) -> str:
    """The server's own words from the SDK's `Status { code: .., message: "..", .. }`."""
    marker = 'message: "'
    if marker in text:
        return text.split(marker, 1)[1].split('"', 1)[0]
    return text


def is_tls_refusal(text: str) -> bool:
    """A connect error that is TLS refusing (a certificate the peer does not trust), not
    the network: retrying cannot fix it, a corrected Secret can."""
    lowered = text.lower()
    return any(word in lowered for word in ("certificate", "tls handshake", "unknownissuer"))


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
