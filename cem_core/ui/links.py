"""Links between the notebooks and the app: the app URL that opens a page in a given state, and the
notebooks that derive what each app page shows (JupyterLab URL and repository path)."""
from __future__ import annotations

import socket
from urllib.parse import urlencode, urlparse

from .pages import APP_PAGES

APP_ADDRESS = "http://localhost:8501"      # where `make app` serves the app
LAB_ADDRESS = "http://localhost:8888"      # where `make notebooks` serves JupyterLab
APP_PATHS = {p.key: p.path for p in APP_PAGES}                       # page -> its URL path
PAGE_NOTEBOOKS = {p.key: p.notebooks for p in APP_PAGES}              # the notebooks that derive or read each page


def app_running(timeout: float = 0.2) -> bool:
    """Whether something accepts connections at APP_ADDRESS right now (the app, while `make app` runs)."""
    address = urlparse(APP_ADDRESS)
    try:
        with socket.create_connection((address.hostname, address.port), timeout=timeout):
            return True
    except OSError:
        return False


def served_address(url: str) -> str:
    """The address the app is served at, from the URL a page was opened at (``st.context.url``): a classroom
    server's host, port and base path, not APP_ADDRESS. ``http://lab:9000/cem/gp?x=1`` gives
    ``http://lab:9000/cem``."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"url={url!r} is invalid: must be an absolute http(s) address")
    base, _, last = parsed.path.rstrip("/").rpartition("/")
    return f"{parsed.scheme}://{parsed.netloc}" + (base if last in APP_PATHS.values() else f"{base}/{last}".rstrip("/"))


def app_link(page: str, controls=None) -> str:
    """The app's URL that opens ``page`` with ``controls`` (a Controls instance; None: the page's defaults)."""
    if page not in APP_PATHS:
        raise ValueError(f"page={page!r} is invalid: must be one of {', '.join(APP_PATHS)}")
    query = f"?{urlencode(controls.to_query())}" if controls is not None else ""
    return f"{APP_ADDRESS}/{APP_PATHS[page]}{query}"


def notebook_link(name: str) -> str:
    """JupyterLab's URL of notebooks/<name>.ipynb while `make notebooks` runs."""
    return f"{LAB_ADDRESS}/lab/tree/{name}.ipynb"


def notebooks_markdown(page: str) -> str:
    """One Markdown line naming the notebooks behind ``page``, each with its path and JupyterLab link."""
    links = ", ".join(f"[`notebooks/{name}.ipynb`]({notebook_link(name)})" for name in PAGE_NOTEBOOKS[page])
    return f"Derived step by step in {links} (open them with `make notebooks`)."
