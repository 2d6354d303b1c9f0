"""The API's documentation pages, served with their assets from this server (no CDN):
Swagger UI at /docs and ReDoc at /redoc, from the files the `fastapi-offline` package
ships, so the pages work on a machine without internet access."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "PUBLIC_PATHS", "install_docs"]

ASSETS = Path(fastapi_offline.__file__).with_name("static")
ASSETS_URL = "/docs/assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
# Served to every caller, as the OpenAPI document is: the pages hold no data.
PUBLIC_PATHS = ("/docs", "/redoc", OAUTH2_REDIRECT_URL)


def install_docs(api: FastAPI) -> None:
    """Serve /docs and /redoc; `api` is made with docs_url=None and redoc_url=None. The
    OpenAPI document declares the bearer token, so the page's Authorize button sends it."""
    _declare_bearer(api)
    api.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")
    favicon = f"{ASSETS_URL}/favicon.png"

    @api.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=api.openapi_url or "/openapi.json", title=f"{api.title} - API",
            oauth2_redirect_url=OAUTH2_REDIRECT_URL, swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css", swagger_favicon_url=favicon,
            # No badge from the online validator: the page asks nothing of another host.
            swagger_ui_parameters={"validatorUrl": None})

    @api.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @api.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=api.openapi_url or "/openapi.json", title=f"{api.title} - API",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js", redoc_favicon_url=favicon,
                              with_google_fonts=False)


def _declare_bearer(api: FastAPI) -> None:
    made = api.openapi

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            schema = made()
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "A token of RUNWRIGHT_TOKENS (a tenant's) or RUNWRIGHT_OPERATOR_TOKENS."}}
            schema["security"] = [{"bearer": []}]
        return api.openapi_schema or {}

    api.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way
