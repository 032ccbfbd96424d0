"""README.md is a front page whose examples run.

- It is at most 300 lines, and every relative link in it and in the guides
  of docs/ resolves: the file exists, and a `#anchor` names one of its
  headings as GitHub spells it.
- Its session runs as printed on what `make run` leaves: tests/readme_session.py
  makes one bash script of its `sh` and `sql` blocks (checked here), and
  tests/chains/test_demo_world.py runs it between the demo's first and
  second runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from readme_session import README, ROOT, blocks, session_script

GUIDES = [
    ROOT / "docs" / f"{name}.md" for name in ("operators", "integrating", "executors", "deploying")
]
MAX_LINES = 300


# -- the front page and its links --------------------------------------------------


def test_the_readme_is_a_front_page_of_at_most_300_lines() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, spaces to hyphens,
    everything but letters, digits, `_` and `-` dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    fenced = False
    found = set()
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(ROOT)}: ({target})"
        if not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    return problems


def test_every_link_of_the_readme_and_the_guides_resolves() -> None:
    readme_links = LINK.findall(README.read_text())
    assert {f"docs/{g.name}" for g in GUIDES} <= {t.partition("#")[0] for t in readme_links}
    assert any(t.startswith("docs/reference/") for t in readme_links)
    problems = [p for path in (README, *GUIDES) for p in broken_links(path)]
    assert problems == []


def test_the_script_feeds_each_sql_block_to_the_psql_before_it() -> None:
    text = "\n".join(
        [
            "```sh",
            'psql "$(qtg db url --login alice)"   # alice',
            "```",
            "```text",
            "not run",
            "```",
            "```sql",
            "SELECT 8080;",
            "```",
            "```sh",
            "curl http://127.0.0.1:8080/healthz",
            "```",
        ]
    )
    runs = blocks(text)
    assert [(b.info, b.line) for b in runs] == [("sh", 1), ("sql", 7), ("sh", 10)]
    script = session_script(runs, 9999)
    assert "{\npsql \"$(qtg db url --login alice)\"   # alice\n} <<'QTG_README_SQL'" in script
    assert "SELECT 8080;" in script  # only the shell's port is README's API's
    assert "curl http://127.0.0.1:9999/healthz" in script
    assert "not run" not in script
