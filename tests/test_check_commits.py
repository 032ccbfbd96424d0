"""scripts/check-commits.py, `make lint`'s check that commit messages read as a
changelog: what it refuses and what it lets through."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


def checker() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "scripts" / "check-commits.py"
    spec = importlib.util.spec_from_file_location("check_commits", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("subject", "body", "problem"),
    [
        ("Added the reaper", [], "use the imperative"),
        ("Adds the reaper", [], "use the imperative"),
        ("Adding the reaper", [], "use the imperative"),
        ("add the reaper", [], "capital letter"),
        ("Add the reaper.", [], "ends with a period"),
        ("Add " + "x" * 69, [], "73 characters"),
        ("Add the reaper", ["why it is needed"], "no blank line"),
    ],
)
def test_a_subject_that_is_not_a_changelog_line_is_refused(
    subject: str, body: list[str], problem: str
) -> None:
    found = checker().problems(subject, body)
    assert any(problem in line for line in found), found


@pytest.mark.parametrize(
    "subject",
    ["Refuse a forged payload", "Embed the wheel's binaries", "Add " + "x" * 68, "Speed up claims"],
)
def test_an_imperative_subject_passes(subject: str) -> None:
    assert checker().problems(subject, ["", "The why."]) == []
