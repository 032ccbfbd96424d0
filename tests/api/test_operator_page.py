"""The operator page in a real headless browser (Debian's chromium, driven by
Playwright with no browser download), two people each in a fresh profile.

Pins: signing in with a wrong password is refused on the page; alice creates
a movement (over the API) and her approve button is refused (QT022, shown);
bob signs in as himself, sees it waiting, approves it, and the page shows it
APPROVED by him, with its DAG and node states; alice's page shows the same.
A cross-site POST (another Origin) and a POST without the session's CSRF
token are refused and change nothing; the page sends no script and forbids
framing.
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
