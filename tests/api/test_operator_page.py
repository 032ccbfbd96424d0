"""The operator page in a real headless browser (Debian's chromium, driven by
Playwright with no browser download), two people each in a fresh profile.

Pins: signing in with a wrong password is refused on the page; alice creates
a movement (over the API) and her approve button is refused (QT022, shown);
bob signs in as himself, sees it waiting, approves it, and the page shows it
APPROVED by him, with its DAG and node states; alice's page shows the same.
A cross-site POST (another Origin) and a POST without the session's CSRF
token are refused and change nothing; the page sends no script and forbids
framing. Rehearsals: bob's Rehearse button asks for one and the page says
who asked, when, and what serves it; once served, the failed rehearsal is
shown (its lines folded, no wider than the screen) with a red line beside
the approve button, and approving shows the QT025 advice; alice's stale
page asking after the approval is refused (QT020), a forged or
cross-site ask writes nothing, and a request served with a problem is
shown with it. Priority: alice sets a movement's priority in its form (shown,
audited), a blank reason is refused (QT002) and a number the page cannot
send, or a form without the CSRF token, changes nothing; a finished
movement has no priority form. Pauses: alice pauses the network on the home
page (listed with her login and reason), her own resume is refused (QT022),
a bad time or a form without the CSRF token changes nothing, and bob's
resume empties the list. The health panel: a quarantined node released, an
UNKNOWN node's requeue asked by alice, her apply refused (QT022), bob's
applied; a FAILED node of which nothing was sent retried by the two; a
finished movement's page has no approve, cancel or priority. Search: by
external id, by state a page of 20 and the next (none repeated, the search
kept); a movement's timeline; a page with 5 KB of evidence no wider than
the screen.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_support import ApiWorld, api_world

from qtg_runner.api.models import CREATE_EXAMPLE
from qtg_runner.db import procs

CHROMIUM = Path(os.environ.get("QTG_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"browser: {CHROMIUM} missing (make install installs Debian's chromium as root)",
    ),
]


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def browser_of(playwright: Any, profile: Path) -> Any:
    """A browser of one person's own, in a fresh profile (user data dir)."""
    return playwright.chromium.launch_persistent_context(
        str(profile), executable_path=str(CHROMIUM), args=FLAGS, headless=True
    )


def sign_in(page: Any, url: str, login: str, password: str) -> None:
    page.goto(url + "/")
    page.fill("#login-field", login)
    page.fill("#password-field", password)
    page.click("#signin")
    page.wait_for_load_state()


def test_two_people_approve_through_the_page(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    alice, bob = world.people["alice"], world.people["bob"]
    with world.client("alice") as api:
        created = api.post("/v1/movements", json={**CREATE_EXAMPLE, "external_id": "page-1"})
        assert created.status_code == 201, created.text
        mid = created.json()["movement_id"]

    alice_browser = browser_of(playwright, tmp_path / "alice")
    bob_browser = browser_of(playwright, tmp_path / "bob")
    try:
        page = alice_browser.new_page()
        sign_in(page, world.url, alice.login, "not her password")
        assert "refused login" in page.inner_text("#flash")
        sign_in(page, world.url, alice.login, alice.password)
        assert page.inner_text("#login") == alice.login
        assert page.locator(f"#waiting-{mid}").count() == 1
        page.click(f"#waiting-{mid} a")
        page.wait_for_url(f"**/movements/{mid}")
        page.click("#approve")
        page.wait_for_load_state()
        assert "refused (QT022)" in page.inner_text("#flash")
        assert page.inner_text("#m-state") == "PENDING_APPROVAL"

        bobs = bob_browser.new_page()
        sign_in(bobs, world.url, bob.login, bob.password)
        assert bobs.inner_text("#login") == bob.login
        bobs.click(f"#waiting-{mid} a")
        bobs.wait_for_url(f"**/movements/{mid}")
        bobs.click("#approve")
        bobs.wait_for_load_state()
        assert bobs.inner_text("#flash") == f"movement {mid}: APPROVED"
        assert bobs.inner_text("#m-state") == "APPROVED"
        assert bobs.inner_text("#m-approved_by") == bob.login
        # the DAG: one box per node with its state, and the node table's tx hashes
        assert [bobs.inner_text(f"#node-{k} .state") for k in ("burn", "mint", "deposit")] == [
            "PENDING"
        ] * 3
        page.reload()
        assert page.inner_text("#m-state") == "APPROVED"
        assert page.inner_text("#m-approved_by") == bob.login
        page.goto(world.url + "/")
        assert page.locator(f"#waiting-{mid}").count() == 0

        # cross-site requests: alice's session cookie, no token / another origin
        cookies = {c["name"]: c["value"] for c in alice_browser.cookies()}
        assert "qtg_session" in cookies
        cookie = next(c for c in alice_browser.cookies() if c["name"] == "qtg_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        with httpx.Client(base_url=world.url, cookies=cookies) as forged:
            no_token = forged.post(f"/movements/{mid}/cancel", data={"reason": "x"})
            assert no_token.status_code == 403
            html = forged.get(f"/movements/{mid}")
            token = html.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            other_site = forged.post(
                f"/movements/{mid}/cancel",
                data={"csrf": token, "reason": "x"},
                headers={"Origin": "https://evil.example"},
            )
            assert other_site.status_code == 403
            assert "<script" not in html.text
            assert "frame-ancestors 'none'" in html.headers["content-security-policy"]
        with world.client("alice") as api:
            assert api.get(f"/v1/movements/{mid}").json()["state"] == "APPROVED"
    finally:
        alice_browser.close()
        bob_browser.close()


def serve_as_admin(world: ApiWorld, outcome: str, lines: list[str]) -> int:
    """What a rehearsal service does with the oldest request (here as the
    admin's login, no fork): claim it, record a rehearsal on the registry it
    read, finish it."""
    with world.admin() as admin:
        claimed = procs.claim_rehearsal_request().one(admin)
        summary = {"outcome": outcome, "lines": lines}
        revision = procs.rehearsal_input(claimed.movement_id).one(admin)["registry_revision"]
        rehearsal_id = procs.record_rehearsal(
            claimed.movement_id, outcome, summary, registry_revision=revision
        ).one(admin)
        procs.finish_rehearsal_request(claimed.request_id, claimed.claim, rehearsal_id, None).one(
            admin
        )
    return rehearsal_id


def test_a_rehearsal_is_asked_for_shown_and_its_failure_warned_of_on_the_page(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    alice, bob = world.people["alice"], world.people["bob"]
    with world.client("alice") as api:
        created = api.post("/v1/movements", json={**CREATE_EXAMPLE, "external_id": "page-r1"})
        assert created.status_code == 201, created.text
        mid = created.json()["movement_id"]
        late = api.post("/v1/movements", json={**CREATE_EXAMPLE, "external_id": "page-r2"})
        late_id = late.json()["movement_id"]

    alice_browser = browser_of(playwright, tmp_path / "alice")
    bob_browser = browser_of(playwright, tmp_path / "bob")
    try:
        bobs = bob_browser.new_page()
        sign_in(bobs, world.url, bob.login, bob.password)
        bobs.goto(f"{world.url}/movements/{mid}")
        assert bobs.inner_text("#rehearsal") == "not rehearsed"
        assert bobs.locator("#rehearsal-warning").count() == 0
        bobs.click("#rehearse")
        bobs.wait_for_load_state()
        assert bobs.inner_text("#flash").startswith(f"movement {mid}: rehearsal requested")
        asked = bobs.inner_text("#rehearsal-request")
        assert asked.startswith(f"rehearsal requested by {bob.login} at 20"), asked
        assert asked.endswith("UTC, served by qtg rehearse --requested"), asked

        # a service served it: the rehearsal failed, one of its lines wider than any screen
        wide = "revert data 0x" + "ab" * 300
        rehearsal_id = serve_as_admin(world, "failed", ["step burn (sim): FAILED", wide])
        bobs.reload()
        assert bobs.inner_text("#rehearsal-outcome") == "failed"
        assert f"(rehearsal {rehearsal_id})" in bobs.inner_text("#rehearsal")
        assert bobs.locator("#rehearsal-request").count() == 0  # served
        assert bobs.inner_text("#rehearsal-warning") == (
            "its last rehearsal failed: read it before approving"
        )
        assert not bobs.is_visible("#rehearsal-lines")  # folded
        bobs.click("#rehearsal-details summary")
        assert bobs.is_visible("#rehearsal-lines")
        assert bobs.inner_text("#rehearsal-lines").startswith("step burn (sim): FAILED\n")
        box = bobs.locator("#rehearsal-lines").bounding_box()
        screen = bobs.viewport_size
        assert box is not None and screen is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= screen["width"], (box, screen)
        assert bobs.evaluate("document.documentElement.scrollWidth") <= screen["width"]

        bobs.click("#approve")
        bobs.wait_for_load_state()
        assert bobs.inner_text("#flash") == f"movement {mid}: APPROVED"
        advice = bobs.inner_text("#advice")
        assert advice.startswith(f"warning (QT025): movement {mid}: its last rehearsal"), advice
        assert bobs.locator("#rehearse").count() == 0  # approved: nothing to rehearse
        assert bobs.locator("#rehearsal-warning").count() == 0

        # alice's page, opened while it waited, asks too late: refused, shown, nothing written
        page = alice_browser.new_page()
        sign_in(page, world.url, alice.login, alice.password)
        page.goto(f"{world.url}/movements/{late_id}")
        with world.client("bob") as api:
            assert api.post(f"/v1/movements/{late_id}/approve").status_code == 200
        page.click("#rehearse")
        page.wait_for_load_state()
        assert page.inner_text("#flash").startswith("refused (QT020): movement"), page.inner_text(
            "#flash"
        )
        assert page.inner_text("#rehearsal") == "not rehearsed"

        # cross-site: no token, another origin; neither asks
        cookies = {c["name"]: c["value"] for c in alice_browser.cookies()}
        with world.client("alice") as api:
            third = api.post("/v1/movements", json={**CREATE_EXAMPLE, "external_id": "page-r3"})
            third_id = third.json()["movement_id"]
        with httpx.Client(base_url=world.url, cookies=cookies) as forged:
            assert forged.post(f"/movements/{third_id}/rehearse").status_code == 403
            html = forged.get(f"/movements/{third_id}")
            token = html.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            other_site = forged.post(
                f"/movements/{third_id}/rehearse",
                data={"csrf": token},
                headers={"Origin": "https://evil.example"},
            )
            assert other_site.status_code == 403
        with world.client("alice") as api:
            assert api.get(f"/v1/movements/{third_id}").json()["rehearsal_request"] is None

        # a request the service could not rehearse: the page says why
        with world.client("alice") as api:
            assert api.post(f"/v1/movements/{third_id}/rehearsal").status_code == 202
        problem = "the rehearsal could not run: set QTG_RPC_A to the chains' RPC URLs"
        with world.admin() as admin:
            claimed = procs.claim_rehearsal_request().one(admin)
            assert claimed.movement_id == third_id
            procs.finish_rehearsal_request(claimed.request_id, claimed.claim, None, problem).one(
                admin
            )
        page.goto(f"{world.url}/movements/{third_id}")
        said = page.inner_text("#rehearsal-problem")
        assert said.startswith(f"the rehearsal requested by {alice.login} at 20"), said
        assert said.endswith(f"could not run: {problem}"), said
        assert page.locator("#rehearsal-request").count() == 0
    finally:
        alice_browser.close()
        bob_browser.close()


def test_a_rehearsal_the_registry_changed_since_is_said_outdated_on_the_page(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    bob = world.people["bob"]
    with world.client("alice") as api:
        created = api.post(
            "/v1/movements", json={**CREATE_EXAMPLE, "external_id": "page-registry-changed"}
        )
        assert created.status_code == 201, created.text
        mid = created.json()["movement_id"]
    with world.client("bob") as api:
        assert api.post(f"/v1/movements/{mid}/rehearsal").status_code == 202
    serve_as_admin(world, "passed", ["step transfer (sim): COMPLETED"])

    browser = browser_of(playwright, tmp_path / "bob")
    try:
        page = browser.new_page()
        sign_in(page, world.url, bob.login, bob.password)
        page.goto(f"{world.url}/movements/{mid}")
        assert page.inner_text("#rehearsal-outcome") == "passed"
        assert page.locator("#rehearsal-registry-changed").count() == 0
        with world.admin() as admin:  # the registry changes after the rehearsal
            procs.upsert_lane_baseline("page-moved", 60).one(admin)
        page.reload()
        assert page.inner_text("#rehearsal-registry-changed").startswith(
            "the registry has changed since this rehearsal ran"
        )
    finally:
        browser.close()


def test_a_priority_is_set_on_the_page_while_the_movement_is_not_finished(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    alice = world.people["alice"]
    with world.client("alice") as api:
        created = api.post("/v1/movements", json={**CREATE_EXAMPLE, "external_id": "page-prio"})
        assert created.status_code == 201, created.text
        mid = created.json()["movement_id"]

    browser = browser_of(playwright, tmp_path / "alice")
    try:
        page = browser.new_page()
        sign_in(page, world.url, alice.login, alice.password)
        page.goto(f"{world.url}/movements/{mid}")
        assert page.inner_text("#m-priority") == "0"
        page.fill("#priority", "9")
        page.fill("#priority-reason", "payroll is due at noon")
        page.click("#set-priority")
        page.wait_for_load_state()
        assert page.inner_text("#flash") == f"movement {mid}: priority 9"
        assert page.inner_text("#m-priority") == "9"
        assert page.input_value("#priority") == "9"

        page.fill("#priority", "3")
        page.fill("#priority-reason", "   ")  # not empty, so the browser sends it
        page.click("#set-priority")
        page.wait_for_load_state()
        assert "refused (QT002)" in page.inner_text("#flash")
        assert page.inner_text("#m-priority") == "9"

        # a form the browser would not send: the page refuses it, nothing changes
        cookies = {c["name"]: c["value"] for c in browser.cookies()}
        with httpx.Client(base_url=world.url, cookies=cookies) as forged:
            token = forged.get(f"/movements/{mid}").text.split('name="csrf" value="', 1)[1]
            token = token.split('"', 1)[0]
            no_token = forged.post(f"/movements/{mid}/priority", data={"priority": "1"})
            assert no_token.status_code == 403
            for bad in ("1.5", "x", str(2**31)):
                sent = forged.post(
                    f"/movements/{mid}/priority",
                    data={"csrf": token, "priority": bad, "reason": "why"},
                )
                assert sent.status_code == 303
        page.reload()
        assert page.inner_text("#m-priority") == "9"

        page.fill("#cancel-reason", "not today")
        page.click("#cancel")
        page.wait_for_load_state()
        assert page.inner_text("#m-state") == "CANCELLED"
        assert page.locator("#set-priority").count() == 0  # finished: no priority form
        with world.client("alice") as api:
            audit = api.get(f"/v1/movements/{mid}/audit").json()["items"]
        assert [(a["action"], a["to_state"]) for a in audit if a["action"] == "priority_set"] == [
            ("priority_set", "9")
        ]
    finally:
        browser.close()


def test_a_pause_is_made_on_the_page_and_resumed_by_another_operator(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    alice, bob = world.people["alice"], world.people["bob"]
    alice_browser = browser_of(playwright, tmp_path / "alice")
    bob_browser = browser_of(playwright, tmp_path / "bob")
    try:
        page = alice_browser.new_page()
        sign_in(page, world.url, alice.login, alice.password)
        assert page.inner_text("#no-pauses") == "nothing is paused"
        page.select_option("#pause-scope", "network")
        page.fill("#pause-name", "*")
        page.fill("#pause-reason", "incident on the page")
        page.fill("#pause-for", "3600")
        page.click("#pause")
        page.wait_for_load_state()
        assert page.inner_text("#flash") == "network * paused"
        row = page.inner_text("#pause-network-_")
        assert alice.login in row and "incident on the page" in row

        page.click("#resume-network-_")  # the pauser: four eyes
        page.wait_for_load_state()
        assert "refused (QT022)" in page.inner_text("#flash")
        assert page.locator("#pause-network-_").count() == 1

        # a bad time, and a form without the CSRF token, change nothing
        cookies = {c["name"]: c["value"] for c in alice_browser.cookies()}
        with httpx.Client(base_url=world.url, cookies=cookies) as forged:
            token = forged.get("/").text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            no_token = forged.post("/pauses/resume", data={"scope": "network", "name": "*"})
            assert no_token.status_code == 403
            bad = {"csrf": token, "scope": "lane", "name": "x", "reason": "why", "for": "0"}
            assert forged.post("/pauses", data=bad).status_code == 303
        page.reload()
        assert "a pause lasts from 1" in page.inner_text("#flash")

        other = bob_browser.new_page()
        sign_in(other, world.url, bob.login, bob.password)
        other.click("#resume-network-_")
        other.wait_for_load_state()
        assert other.inner_text("#flash") == "network *: resumed"
        assert other.inner_text("#no-pauses") == "nothing is paused"
    finally:
        alice_browser.close()
        bob_browser.close()


def test_nodes_and_alerts_that_need_an_operator_are_acted_on_from_the_page(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    """The home page's health panel: a quarantined node released by one
    operator; an UNKNOWN node's requeue asked by alice, her own apply refused
    (QT022), applied by bob; a form without the CSRF token changes nothing."""
    from engine import create_started, node_ids, submit
    from rows import ONE, claim_of, fail, prepare

    alice, bob = world.people["alice"], world.people["bob"]
    with world.admin() as admin:
        done = create_started(admin, ONE, "page-done")
        assert submit(admin, claim_of(admin, node_ids(admin, done)["a"]), settled=True) == (
            "COMPLETED"
        )
        stuck = node_ids(admin, create_started(admin, ONE, "page-quarantined"))["a"]
        claimed = claim_of(admin, stuck)
        procs.quarantine_nodes([stuck], [claimed["claim_secret"]], ["submit: boom"]).all(admin)
        unknown = node_ids(admin, create_started(admin, ONE, "page-unknown"))["a"]
        claimed = claim_of(admin, unknown)
        prepare(admin, claimed)
        assert fail(admin, claimed, retryable=True) == "UNKNOWN"
        failed = node_ids(admin, create_started(admin, ONE, "page-failed"))["a"]
        assert fail(admin, claim_of(admin, failed), retryable=False) == "FAILED"
    alice_browser = browser_of(playwright, tmp_path / "alice")
    bob_browser = browser_of(playwright, tmp_path / "bob")
    try:
        page = alice_browser.new_page()
        sign_in(page, world.url, alice.login, alice.password)

        # a finished movement's page offers nothing to do
        page.goto(f"{world.url}/movements/{done}")
        assert page.inner_text("#m-state") == "COMPLETED"
        for action in ("#approve", "#cancel", "#set-priority", "#rehearse"):
            assert page.locator(action).count() == 0, action
        page.goto(f"{world.url}/")

        # a form without the CSRF token changes nothing
        cookies = {c["name"]: c["value"] for c in alice_browser.cookies()}
        with httpx.Client(base_url=world.url, cookies=cookies) as forged:
            no_token = forged.post("/nodes/release", data={"node_id": stuck, "reason": "x"})
            assert no_token.status_code == 403
        page.reload()
        assert page.locator(f"#release-{stuck}").count() == 1

        page.fill(f"#release-{stuck}-reason", "the bug is fixed")
        page.click(f"#release-{stuck}")
        page.wait_for_load_state()
        assert page.inner_text("#flash") == f"node {stuck} released: SUBMITTING"
        assert page.locator(f"#release-{stuck}").count() == 0

        page.fill(f"#requeue-{unknown}-reason", "dropped by every node")
        page.click(f"#requeue-{unknown}")
        page.wait_for_load_state()
        assert page.inner_text("#flash") == f"node {unknown}: requeue REQUESTED (UNKNOWN)"
        assert page.inner_text(f"#requeue-{unknown}") == "apply requeue"
        page.fill(f"#requeue-{unknown}-reason", "me again")
        page.click(f"#requeue-{unknown}")  # the asker: four eyes
        page.wait_for_load_state()
        assert "refused (QT022)" in page.inner_text("#flash")

        other = bob_browser.new_page()
        sign_in(other, world.url, bob.login, bob.password)
        other.fill(f"#requeue-{unknown}-reason", "confirmed")
        other.click(f"#requeue-{unknown}")
        other.wait_for_load_state()
        assert other.inner_text("#flash") == f"node {unknown}: requeue APPLIED (READY)"
        assert other.locator(f"#requeue-{unknown}").count() == 0

        # a FAILED node of which nothing was sent: retried by two operators
        page.reload()
        page.fill(f"#retry-{failed}-reason", "the allowance is raised")
        page.click(f"#retry-{failed}")
        page.wait_for_load_state()
        assert page.inner_text("#flash") == f"node {failed}: requeue REQUESTED (FAILED)"
        other.reload()
        assert other.inner_text(f"#retry-{failed}") == "apply retry"
        other.fill(f"#retry-{failed}-reason", "checked")
        other.click(f"#retry-{failed}")
        other.wait_for_load_state()
        assert other.inner_text("#flash") == f"node {failed}: requeue APPLIED (READY)"
        assert other.locator(f"#retry-{failed}").count() == 0
    finally:
        alice_browser.close()
        bob_browser.close()


def test_movements_are_searched_and_paged_and_a_movement_shows_its_timeline(
    world: ApiWorld, playwright: Any, tmp_path: Path
) -> None:
    """The home page's search (a state, an external id, a creator) and its
    pages (newest first, none repeated); a movement's page shows its
    timeline (who did what, when, why) and folds its evidence: never wider
    than the screen."""
    from datetime import UTC, datetime, timedelta

    from engine import create, create_started, node, node_ids, plan
    from rows import ONE

    alice = world.people["alice"]
    with world.admin() as admin:
        made = [create_started(admin, ONE, f"search-{i:02d}") for i in range(25)]
        on_lane = create_started(admin, plan(node("a", lane="cctp_fast")), "search-lane")
        wide = node_ids(admin, made[0])["a"]
        admin.execute(
            "UPDATE movement_request_nodes SET evidence = %s::jsonb WHERE id = %s",
            ('{"blob": "' + "x" * 5000 + '"}', wide),
        )
    browser = browser_of(playwright, tmp_path / "alice")
    try:
        page = browser.new_page()
        sign_in(page, world.url, alice.login, alice.password)

        page.fill("#search-external-id", "search-07")
        page.click("#search-go")
        page.wait_for_load_state()
        assert page.locator("tr[id^='recent-']").count() == 1
        assert page.locator(f"#recent-{made[7]}").count() == 1
        assert page.input_value("#search-external-id") == "search-07"  # the search kept

        page.goto(f"{world.url}/?state=EXECUTING")
        first = [int(i.split("-")[1]) for i in page.locator("tr[id^='recent-']").evaluate_all(
            "rows => rows.map(r => r.id)")]  # fmt: skip
        assert len(first) == 20 and first == sorted(first, reverse=True)
        page.click("#older")
        page.wait_for_load_state()
        second = [int(i.split("-")[1]) for i in page.locator("tr[id^='recent-']").evaluate_all(
            "rows => rows.map(r => r.id)")]  # fmt: skip
        assert second and max(second) < min(first)
        assert page.input_value("#search-state") == "EXECUTING"
        page.goto(f"{world.url}/?state=COMPLETED&external_id=search-01")
        assert page.locator("tr[id^='recent-']").count() == 0

        # by lane, and by the days they were created (UTC)
        page.goto(f"{world.url}/")
        page.fill("#search-lane", "cctp_fast")
        page.click("#search-go")
        page.wait_for_load_state()
        assert page.locator(f"#recent-{on_lane}").count() == 1
        listed = page.locator("tr[id^='recent-']").evaluate_all("rows => rows.map(r => r.id)")
        assert not {f"recent-{m}" for m in made} & set(listed)  # theirs is the default lane
        today = datetime.now(UTC).date()
        page.goto(f"{world.url}/?until={today - timedelta(days=1)}")
        assert page.locator("tr[id^='recent-']").count() == 0
        page.goto(f"{world.url}/?since={today}&until={today}&external_id=search-07")
        assert page.locator(f"#recent-{made[7]}").count() == 1
        assert page.input_value("#search-since") == today.isoformat()

        # auto-refresh, the search kept; the amounts one way; the workers. The
        # page is not reloaded (what is typed in it stays), its live frame is
        page.goto(f"{world.url}/?external_id=search-07")
        page.click("#refresh")
        page.wait_for_load_state()
        assert "refresh=15" in page.url and "external_id=search-07" in page.url
        assert page.locator("meta[http-equiv='refresh']").count() == 0
        live = page.frame_locator("#live")
        assert live.locator("tr[id^='recent-']").count() == 1
        assert "\t100\t" in live.locator(f"#recent-{made[7]}").inner_text() + "\t"
        assert "no worker runs" in live.locator("#no-workers").inner_text()
        assert live.locator("form").count() == 0  # to look at; acting stops the refresh
        page.fill("#pause-reason", "half a reason, still being typed")
        page.evaluate("window.scrollTo(0, 40)")
        with world.admin() as admin:
            arrived = create(admin, ONE, "arrives-while-watching")
        # the frame shows it on one of its reloads (every second here)
        live.locator(f"#waiting-{arrived}").wait_for(timeout=15_000)
        assert page.input_value("#pause-reason") == "half a reason, still being typed"
        assert page.input_value("#search-external-id") == "search-07"
        # the frame may be framed by this site alone; the page by none
        framed = page.request.get(f"{world.url}/live").headers["content-security-policy"]
        whole = page.request.get(f"{world.url}/").headers["content-security-policy"]
        assert "frame-ancestors 'self'" in framed and "frame-ancestors 'none'" in whole
        page.click("#refresh")  # stop refreshing
        page.wait_for_load_state()
        assert page.locator("#live").count() == 0
        assert page.locator(f"#waiting-{arrived}").count() == 1

        page.goto(f"{world.url}/movements/{made[0]}")
        events = page.inner_text("#timeline")
        assert "created" in events and "→ APPROVED" in events and "bob" in events
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width  # the evidence folded, wrapped
    finally:
        browser.close()
