"""Label and field selectors as the API server reads them (pure).

Labels: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors -- equality
(`k=v`, `k==v`, `k!=v`), set-based (`k in (a,b)`, `k notin (a,b)`), existence (`k`, `!k`); terms are ANDed.
Fields: https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/ -- `metadata.name` and
`metadata.namespace` with `=`, `==`, `!=` (every resource supports these two); events also `involvedObject.kind`,
`involvedObject.namespace`, `involvedObject.name`, `involvedObject.uid`, `reason`, `type` and `source` (the
component), as the API server's event strategy selects them (kubernetes pkg/registry/core/event/strategy.go).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
FIELDS = ("metadata.name", "metadata.namespace")
EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                "reason", "type", "source")


def _field(obj: Mapping[str, Any], key: str) -> str:
    if key == "source":
        return str((obj.get("source") or {}).get("component") or "")
    value: Any = obj
    for part in key.split("."):
        value = (value or {}).get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


class SelectorError(ValueError):
    """A selector the server cannot parse (answered 400 BadRequest)."""


def _terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def label_matcher(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _terms(selector or ""):
        found = _SET_TERM.match(term)
        if found:
            key, op, values = found.group(1), found.group(2), {v.strip() for v in found.group(3).split(",")}
            if op == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif "!=" in term:
            key, value = (p.strip() for p in term.split("!=", 1))
            checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in term:
            key, value = (p.strip() for p in term.replace("==", "=").split("=", 1))
            checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif term.startswith("!"):
            checks.append(lambda labels, k=term[1:].strip(): k not in labels)
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", term):
            checks.append(lambda labels, k=term: k in labels)
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")
    return lambda labels: all(check(labels) for check in checks)


def field_matcher(selector: str | None, kind: str = "") -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a whole object; `kind` "Event" also allows the event fields."""
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    allowed = FIELDS + (EVENT_FIELDS if kind == "Event" else ())
    for term in _terms(selector or ""):
        negate = "!=" in term
        key, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        key, value = key.strip(), value.strip()
        if key not in allowed:
            raise SelectorError(f'field label not supported: {key}')
        checks.append(lambda obj, k=key, v=value, n=negate: (_field(obj, k) == v) != n)
    return lambda obj: all(check(obj) for check in checks)


def matcher(label_selector: str | None, field_selector: str | None,
            kind: str = "") -> Callable[[Mapping[str, Any]], bool]:
    """One predicate over a whole object for both selectors (`kind`: the resource's, for its own fields)."""
    labels, fields = label_matcher(label_selector), field_matcher(field_selector, kind)

    def matches(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return labels(meta.get("labels") or {}) and fields(obj)

    return matches
