"""Label and field selectors, parsed once per request and matched per object.

Label selectors support the whole string syntax (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
``a notin (x)``, ``a``, ``!a``). Field selectors support ``metadata.name`` and
``metadata.namespace`` with ``=``, ``==`` and ``!=``, like the API server for most kinds.
Bad selectors raise :class:`~kubesim._errors.ApiError` 400 naming the offending term.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubesim._errors import ApiError

__all__ = ["Selector", "parse_field_selector", "parse_label_selector"]

LabelTest = Callable[[Mapping[str, str]], bool]


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    terms.append("".join(current).strip())
    return [t for t in terms if t]


def _bad(kind: str, term: str, why: str) -> ApiError:
    return ApiError(400, "BadRequest", f"unable to parse requirement: {kind} {term!r}: {why}")


def _label_term(term: str) -> LabelTest:
    for op in (" notin ", " in "):
        if op in term:
            key, _, rest = term.partition(op)
            rest = rest.strip()
            if not (rest.startswith("(") and rest.endswith(")")):
                raise _bad("label selector", term, "values must be in parentheses")
            values = frozenset(v.strip() for v in rest[1:-1].split(",") if v.strip())
            key = key.strip()
            if op == " in ":
                return lambda labels: labels.get(key) in values
            return lambda labels: labels.get(key) not in values
    for op in ("!=", "==", "="):
        if op in term:
            key, _, value = term.partition(op)
            key, value = key.strip(), value.strip()
            if not key:
                raise _bad("label selector", term, "empty key")
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda labels: key not in labels
    if any(c in term for c in " ()<>"):
        raise _bad("label selector", term, "unknown operator")
    return lambda labels: term in labels


def parse_label_selector(text: str | None) -> list[LabelTest]:
    """The tests a label selector string stands for (all must hold); [] matches everything."""
    if not text:
        return []
    return [_label_term(term) for term in _split_terms(text)]


def parse_field_selector(text: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(must-equal, must-not-equal) maps over ``name`` and ``namespace``."""
    equal: dict[str, str] = {}
    unequal: dict[str, str] = {}
    if not text:
        return equal, unequal
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                field, _, value = term.partition(op)
                break
        else:
            raise _bad("field selector", term, "expected field=value or field!=value")
        field = field.strip()
        if field not in ("metadata.name", "metadata.namespace"):
            raise ApiError(
                400,
                "BadRequest",
                f'field label not supported: {field}" (kubesim supports metadata.name and '
                "metadata.namespace)",
            )
        short = field.removeprefix("metadata.")
        (unequal if op == "!=" else equal)[short] = value.strip()
    return equal, unequal


@dataclass(frozen=True, slots=True)
class Selector:
    """A request's label and field selectors together; ``matches`` is the per-object test."""

    labels: tuple[LabelTest, ...] = ()
    fields_equal: tuple[tuple[str, str], ...] = ()
    fields_unequal: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, label_selector: str | None, field_selector: str | None) -> Selector:
        equal, unequal = parse_field_selector(field_selector)
        return cls(
            tuple(parse_label_selector(label_selector)),
            tuple(equal.items()),
            tuple(unequal.items()),
        )

    @property
    def empty(self) -> bool:
        return not (self.labels or self.fields_equal or self.fields_unequal)

    @property
    def name(self) -> str | None:
        """The one name asked for with ``metadata.name=``, if any (a fast path)."""
        return dict(self.fields_equal).get("name")

    def matches(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        for field, value in self.fields_equal:
            if (namespace if field == "namespace" else name) != value:
                return False
        for field, value in self.fields_unequal:
            if (namespace if field == "namespace" else name) == value:
                return False
        return all(test(labels) for test in self.labels)
