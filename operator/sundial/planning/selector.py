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

_KEY = r"(?:[a-z0-9A-Z.-]+/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?"
_VALUE = r"([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?"
_REQUIREMENT = re.compile(rf"^(?P<not>!)?(?P<key>{_KEY})(?:(?P<op>!=|==|=)(?P<value>{_VALUE}))?$")


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "exists", "absent", "=", "!="
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "absent":
            return self.key not in labels
        if self.op == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


@dataclass(frozen=True)
class LabelSelector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)


def parse_selector(text: str) -> LabelSelector:
    requirements: list[Requirement] = []
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
            requirements.append(Requirement(key, "absent"))
        elif op is None:
            requirements.append(Requirement(key, "exists"))
        else:
            requirements.append(Requirement(key, "!=" if op == "!=" else "=", value))
    return LabelSelector(text.strip(), tuple(requirements))
