"""Equality-based label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma = and), the
subset the apiserver's own listings take, matched here against the objects a watch brings.

kopf's watches cannot carry a server-side selector, so an operator that serves one share of
the cluster (SUNDIAL_LABEL_SELECTOR) lists with the selector and filters watch events with
this. Set-based selectors (`in`, `notin`) are refused at start rather than half-supported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sundial.api.connection_models import LabelSelector, LabelSelectorRequirement

_KEY = r"(?:[a-z0-9A-Z.-]+/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
_VALUE = r"([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?"
_REQUIREMENT = re.compile(rf"^(?P<not>!)?(?P<key>{_KEY})(?:(?P<op>!=|==|=)(?P<value>{_VALUE}))?$")


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class ShareSelector:
    """SUNDIAL_LABEL_SELECTOR: the share of ScheduledJobs this operator serves. Its text is
    what the listings send the apiserver; watch events are matched by the same evaluator as
    a connection's namespaceSelector, the selector parsed into metav1's form."""

    text: str
    selector: LabelSelector

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return selector_matches(self.selector, labels or {})


def parse_selector(text: str) -> ShareSelector:
    """`k=v` -> In [v], `k!=v` -> NotIn [v] (a Pod without k matches, as on the
    apiserver), `k` -> Exists, `!k` -> DoesNotExist."""
    requirements: list[LabelSelectorRequirement] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        found = _REQUIREMENT.match(part.replace(" ", ""))
        if found is None:
            raise SelectorError(
                f"label selector {text!r}: {part!r} is not k=v, k!=v, k or !k "
                "(set-based selectors are not supported)"
            )
        key, op, value = found["key"], found["op"], found["value"] or ""
        if found["not"]:
            if op:
                raise SelectorError(f"label selector {text!r}: {part!r} mixes ! with {op}")
            requirements.append(LabelSelectorRequirement(key=key, operator="DoesNotExist"))
        elif op is None:
            requirements.append(LabelSelectorRequirement(key=key, operator="Exists"))
        else:
            operator = "NotIn" if op == "!=" else "In"
            requirements.append(
                LabelSelectorRequirement(key=key, operator=operator, values=[value])
            )
    return ShareSelector(text.strip(), LabelSelector(match_expressions=requirements))


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics (every requirement ANDed; {} matches everything).
    Written here because the Kubernetes Python client ships no selector evaluation: its
    Go counterpart is apimachinery's labels.Selector."""
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or []:
        present = requirement.key in labels
        values = requirement.values or []
        if requirement.operator == "In" and not (present and labels[requirement.key] in values):
            return False
        if requirement.operator == "NotIn" and present and labels[requirement.key] in values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True
