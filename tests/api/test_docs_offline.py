"""The API's pages load nothing from another host: /docs works on a treasury
host without internet (api/docs.py), against a real uvicorn server.

Pins: /docs references only this API's URLs, and each file it references is
served (200, its content type, no login, kept by the browser); its policy
lets it load nothing from elsewhere, and Swagger UI's validator badge is off;
FastAPI's CDN pages (/redoc) are gone and the package's other files are not
served; every HTML page the API serves (each GET route, signed in to the
operator page) names no other host in what it loads and carries a
Content-Security-Policy that allows no other host; in a real browser that
may reach nothing but the API, /docs shows every operation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from api_support import ApiWorld, api_world

from qtg_runner.api.models import CREATE_EXAMPLE

CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
LOADING = {"src", "href", "action", "formaction", "srcset", "poster", "data", "background"}
"""The attributes through which a page makes the browser fetch something."""


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


class Loads(HTMLParser):
    """The URLs an HTML page makes a browser fetch or go to: its loading
    attributes, its inline scripts' string URLs, its styles' url(...)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in LOADING:
                self.urls.extend(v.split()[0] for v in value.split(",") if v.strip())
            if name == "style":
                self.inline.append(value)
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self.inline.append(data)
            self.urls.extend(re.findall(r"url\(\s*['\"]?([^'\")\s]+)", data))
            self.urls.extend(re.findall(r"""(?:url|src|href)\s*[:=]\s*['"]([^'"]+)['"]""", data))


def loads(page: str) -> Loads:
    parser = Loads()
    parser.feed(page)
    return parser


def other_hosts(urls: list[str], base: str) -> list[str]:
    """The URLs among ``urls`` that lead off ``base``'s host (data: is the page's own)."""
    here = urlsplit(base)
    off = []
    for url in urls:
        full = urlsplit(urljoin(base + "/", url))
        if full.scheme == "data":
            continue
        if (full.scheme, full.netloc) != (here.scheme, here.netloc):
            off.append(url)
    return off


def policy_hosts(csp: str) -> list[str]:
    """The sources of a Content-Security-Policy that name a host or a scheme
    other than data: (anything but 'self', 'none', hashes and keywords)."""
    sources = [s for directive in csp.split(";") for s in directive.split()[1:]]
    return [s for s in sources if not s.startswith("'") and s != "data:"]


def test_docs_loads_only_this_apis_files(world: ApiWorld) -> None:
    with httpx.Client(base_url=world.url, timeout=30) as anonymous:
        docs = anonymous.get("/docs")
        assert docs.status_code == 200, docs.text
        assert docs.headers["content-type"].startswith("text/html")
        found = loads(docs.text)
        assert other_hosts(found.urls, world.url) == []
        assert not re.search(r"(?i)https?:|//[a-z0-9]", docs.text.replace(world.url, ""))
        assert '"validatorUrl": null' in docs.text  # no badge from validator.swagger.io
        csp = docs.headers["content-security-policy"]
        assert "default-src 'none'" in csp and policy_hosts(csp) == []

        assets = [u for u in found.urls if urlsplit(u).path != "/openapi.json"]
        suffixes = sorted(Path(urlsplit(u).path).suffix for u in assets)
        assert suffixes == [".css", ".js", ".png"], found.urls
        schema = [u for u in found.urls if u == "/openapi.json"]
        assert schema, found.urls
        assert anonymous.get(schema[0]).json()["info"]["title"] == "QTG engine API"
        for url in assets:
            served = anonymous.get(url)
            assert served.status_code == 200, (url, served.text)
            expected = CONTENT_TYPES[Path(urlsplit(url).path).suffix]
            assert served.headers["content-type"].split(";")[0] == expected, url
            assert served.headers["x-content-type-options"] == "nosniff"
            assert "immutable" in served.headers["cache-control"]  # the path names the version
            assert len(served.content) > 500
            assert "www-authenticate" not in served.headers
        bundle = next(u for u in assets if u.endswith("swagger-ui-bundle.js"))
        assert "SwaggerUIBundle" in anonymous.get(bundle).text

        # FastAPI's CDN page is gone; the package's other files are not served
        assert anonymous.get("/redoc").status_code == 404
        folder = bundle.rsplit("/", 1)[0]
        for name in ("index.html", "swagger-initializer.js", "../docs", "swagger-ui.js.map"):
            assert anonymous.get(f"{folder}/{name}").status_code == 404, name
        # credentials change nothing: the page asks for none, and reads none
        wrong = anonymous.get("/docs", auth=("nobody_at_all", "x"))
        assert wrong.status_code == 200 and "www-authenticate" not in wrong.headers


def html_pages(world: ApiWorld) -> list[str]:
    """A URL for every GET route of the API, its path parameters filled with
    a movement that exists (and one of the docs' files)."""
    app: Any = world.running.server.config.app
    with world.client("alice") as alice:
        made = alice.post("/v1/movements", json={**CREATE_EXAMPLE, "external_id": "pages-1"})
        assert made.status_code == 201, made.text
    values = {
        "movement_id": str(made.json()["movement_id"]),
        "proposal_id": "1",
        "code": "QT022",
        "name": "swagger-ui.css",
    }
    urls = []
    for route in app.routes:
        if "GET" in (getattr(route, "methods", None) or ()):
            urls.append(re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], route.path))
    return urls


def test_no_page_the_api_serves_loads_from_another_host(world: ApiWorld) -> None:
    alice = world.people["alice"]
    urls = html_pages(world)
    with httpx.Client(base_url=world.url, auth=alice.auth, timeout=30) as client:
        anonymous_signin = client.get("/signin", auth=None)
        signed = client.post(
            "/signin", data={"login": alice.login, "password": alice.password}, auth=None
        )
        assert signed.status_code == 303, signed.text
        pages = {"/signin (anonymous)": anonymous_signin}
        for url in urls:
            response = client.get(url)
            assert response.status_code < 500, (url, response.text)
            if response.headers.get("content-type", "").startswith("text/html"):
                pages[url] = response
    movement = next(u for u in urls if u.startswith("/movements/"))
    assert {"/docs", "/signin", "/", movement} <= set(pages), sorted(pages)
    for url, response in pages.items():
        assert response.status_code == 200, (url, response.text)
        found = loads(response.text)
        assert found.urls, url  # the parser sees what each page loads
        assert other_hosts(found.urls, world.url) == [], url
        for text in found.inline:
            assert not re.search(r"(?i)\b(?:https?:)?//[a-z0-9.-]+", text), (url, text[:200])
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and policy_hosts(csp) == [], (url, csp)


CHROMIUM = Path(os.environ.get("QTG_CHROMIUM", "/usr/bin/chromium"))


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"browser: {CHROMIUM} missing (make install installs Debian's chromium as root)",
)
def test_docs_shows_every_operation_in_a_browser_that_reaches_only_the_api(
    world: ApiWorld, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    spec = httpx.get(world.url + "/openapi.json", timeout=30).json()
    operations = sum(len(methods) for methods in spec["paths"].values())
    refused: list[str] = []
    problems: list[str] = []

    def only_the_api(route: Any) -> None:
        if route.request.url.startswith(world.url + "/"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            headless=True,
        )
        try:
            page = browser.new_page()
            page.route("**/*", only_the_api)
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.goto(world.url + "/docs")
            page.wait_for_selector(".opblock", timeout=30_000)
            assert page.locator(".opblock").count() == operations
            assert "QTG engine API" in page.inner_text(".info .title")
            page.screenshot(path=str(tmp_path / "docs.png"))  # kept when the test fails
        finally:
            browser.close()
    assert refused == []
    assert problems == []
