"""The API's documentation page at /docs: Swagger UI served by this API
itself, so that it shows on a treasury host that reaches no internet.

FastAPI's own /docs and /redoc load Swagger UI and ReDoc from a CDN and a
favicon from FastAPI's site: on an offline host the page stays blank. They
are off (create_app: docs_url=None, redoc_url=None). This page loads the
Swagger UI files that the swagger-ui-bundle-v2 package installs, served at
``/docs/swagger-ui-<version>/<file>`` (only the three files the page uses:
the package's own index.html would fetch the petstore's schema). The
version in the path lets a browser keep them: a new version is a new path.

Swagger UI calls out on its own in one place, its validator badge, an image
that hands the schema's URL to validator.swagger.io: ``validatorUrl`` is
null. The page's Content-Security-Policy lets it load nothing from another
origin, its one inline script allowed by its hash.

Like /openapi.json, the page and its files need no login (api/guard.py
authenticates /v1, /metrics and /readyz only); the schema names no secret.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from swagger_ui_bundle import swagger_ui_path

from qtg_runner.api.problems import Problem

DOCS_URL = "/docs"
SWAGGER_UI = Path(str(swagger_ui_path))
"""The installed Swagger UI files (swagger-ui-bundle-v2), a folder named for its version."""
ASSETS_URL = f"{DOCS_URL}/{SWAGGER_UI.name}"

ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
"""The files /docs loads, and their content types."""

SWAGGER_UI_PARAMETERS = {"validatorUrl": None}
"""Added to FastAPI's defaults: no validator badge (see the module's docstring)."""

ASSET_HEADERS = {"Cache-Control": "public, max-age=31536000, immutable"}

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def csp(inline_scripts: list[str]) -> str:
    """The page's Content-Security-Policy: this origin only, and its inline
    scripts by their SHA-256."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in inline_scripts
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )


def mount_docs(app: FastAPI) -> None:
    if not all((SWAGGER_UI / name).is_file() for name in ASSETS):
        raise RuntimeError(f"Swagger UI's files are missing from {SWAGGER_UI}: reinstall")

    @app.get(DOCS_URL, include_in_schema=False)
    async def docs(request: Request) -> Response:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title}: Swagger UI",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon-32x32.png",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )
        body = bytes(page.body).decode()
        return HTMLResponse(
            body,
            headers={
                "Content-Security-Policy": csp(_INLINE_SCRIPT.findall(body)),
                "X-Frame-Options": "DENY",
                "Referrer-Policy": "same-origin",
            },
        )

    @app.get(ASSETS_URL + "/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise Problem(404, "Not found", f"no file {name[:100]!r} of the docs page")
        return FileResponse(SWAGGER_UI / name, media_type=media_type, headers=ASSET_HEADERS)
