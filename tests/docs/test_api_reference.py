"""The API reference: every public operator, sensor, trigger and hook documents every parameter of its
constructor (`:param name:` in the class docstring, which mkdocstrings renders), and every one of them has a
page in docs/reference/."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from tests.conftest import REPO

PACKAGES = ("operators", "sensors", "triggers", "hooks")
PARAM_RE = re.compile(r"^\s*:param\s+(?:[\w\[\], |.]+\s+)?(\w+):", re.M)


def public_classes() -> list[type]:
    classes = []
    for package in PACKAGES:
        for path in sorted((REPO / "provider" / "mtc_provider" / package).glob("*.py")):
            if path.stem == "__init__":
                continue
            module = importlib.import_module(f"mtc_provider.{package}.{path.stem}")
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_") \
                        and _is_airflow_component(obj):
                    classes.append(obj)
    return classes


def _is_airflow_component(cls: type) -> bool:
    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    return issubclass(cls, (BaseOperator, BaseTrigger, BaseHook))


def undocumented(cls: type) -> list[str]:
    documented = set(PARAM_RE.findall(inspect.getdoc(cls) or ""))
    parameters = inspect.signature(cls.__init__).parameters.values()
    return [p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            and p.name not in documented]


CLASSES = public_classes()


def test_the_reference_covers_operators_sensors_triggers_and_hooks() -> None:
    kinds = {cls.__module__.split(".")[1] for cls in CLASSES}
    assert kinds == set(PACKAGES)
    assert len(CLASSES) >= 12


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_public_parameter_has_a_docstring_entry(cls: type) -> None:
    assert not undocumented(cls), f"{cls.__name__}: add ':param NAME:' for each of these"


def test_the_check_can_fail() -> None:
    class Bare:
        """No parameters documented.

        :param documented: this one is.
        """

        def __init__(self, documented: int, forgotten: str, **kwargs) -> None: ...

    assert undocumented(Bare) == ["forgotten"]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_class_is_on_a_reference_page(cls: type) -> None:
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "docs" / "reference").glob("*.md"))
    assert f"::: {cls.__module__}.{cls.__name__}" in pages or f"::: {cls.__module__}\n" in pages
