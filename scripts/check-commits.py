"""Check the history's commit messages read as a changelog (`make lint`).

Every commit after CHECKED_FROM (the history before it is kept as it is):
the subject is at most 72 characters, starts with a capital letter and a
verb in the imperative ("Add", "Refuse", not "Added", "Adds", "Adding"),
and does not end with a period; a body, when there is one, is separated
from the subject by a blank line. Exits 1 naming each commit that does not.

    python scripts/check-commits.py [REVISION]     (default HEAD)
"""

from __future__ import annotations

import re
import subprocess
import sys

CHECKED_FROM = "7977bc226d883f5afb840856d680370f23b1b0ab"
"""The last commit written before the rule was checked."""

MAX_SUBJECT = 72

LANDED_AS_THEY_ARE = {
    "f37813b7c54ef9e4f76249d419282c6c46c280dd",  # its subject is 73 characters
}
"""Commits on main that break a rule: main is not rewritten, so they stay as they are."""

NOT_IMPERATIVE = re.compile(r"^[A-Z][a-z]*(ed|ing)$")
"""Past tenses and gerunds ("Added", "Adding") ..."""

IMPERATIVE_ANYWAY = {"Embed", "Exceed", "Feed", "Need", "Proceed", "Seed", "Shed", "Speed",
                     "Succeed", "Bring", "String"}  # fmt: skip
"""... but for verbs whose imperative ends so."""

THIRD_PERSON = re.compile(
    r"^(Adds|Allows|Changes|Checks|Cleans|Creates|Deletes|Ensures|Fixes|Gives|Handles|"
    r"Implements|Improves|Keeps|Lets|Makes|Moves|Refactors|Removes|Renames|Replaces|Returns|"
    r"Runs|Sets|Shows|Splits|Stops|Updates|Uses|Writes)$"
)
"""Third-person forms ("Adds", "Fixes") of the verbs a subject most often starts with."""


def problems(subject: str, body: list[str]) -> list[str]:
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"subject is {len(subject)} characters (at most {MAX_SUBJECT})")
    first = subject.split(" ", 1)[0]
    if not first[:1].isupper():
        found.append("subject does not start with a capital letter")
    elif (NOT_IMPERATIVE.match(first) and first not in IMPERATIVE_ANYWAY) or THIRD_PERSON.match(
        first
    ):
        found.append(f"subject starts with {first!r}: use the imperative (e.g. 'Add', 'Fix')")
    if subject.endswith("."):
        found.append("subject ends with a period")
    if body and body[0].strip():
        found.append("no blank line between the subject and the body")
    return found


def main(argv: list[str]) -> int:
    revision = argv[1] if len(argv) > 1 else "HEAD"
    known = subprocess.run(
        ["git", "merge-base", "--is-ancestor", CHECKED_FROM, revision], capture_output=True
    )
    if known.returncode != 0:
        print(f"check-commits: {CHECKED_FROM[:10]} is not in {revision}'s history; nothing checked")
        return 0
    log = subprocess.run(
        ["git", "log", "--format=%H%x00%B%x01", f"{CHECKED_FROM}..{revision}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    failed = 0
    for entry in filter(None, (e.strip("\n") for e in log.split("\x01"))):
        commit, message = entry.split("\x00", 1)
        if commit in LANDED_AS_THEY_ARE:
            continue
        lines = message.rstrip("\n").split("\n")
        for problem in problems(lines[0], lines[1:]):
            print(f"{commit[:10]} {lines[0][:60]!r}: {problem}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
