"""CEM Lab web app: the frame and router. Each page is a module under app_pages/.

Launch with `make app` (or `python -m streamlit run app.py`).
"""
import sys
from pathlib import Path

import streamlit as st
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))   # app_pages importable however the app is started

from app_pages import lesson_mode  # noqa: E402
from app_pages.common import teacher_mode, warm_up  # noqa: E402
from cem_core.ui.pages import APP_PAGES  # noqa: E402

warm_up()
present = lesson_mode.presentation()
st.set_page_config(page_title="CEM Lab", page_icon=str(Path(__file__).resolve().parent / "app_pages" / "icon.png"),
                   layout="wide",   # the icon a local file: a :material/...: one is fetched from a font service
                   initial_sidebar_state="collapsed" if present else "auto")
torch.set_num_threads(1)   # page compute is small; one thread avoids fighting a background training run

HISTORY_JS = Path(__file__).resolve().parent / "app_pages" / "history.js"
PAGES = {p.key: st.Page(p.file, title=p.title, icon=p.icon, url_path=p.path or None, default=not p.path)
         for p in APP_PAGES}

# Less empty space above the title, so that a projected page shows its plots (Streamlit has no setting for it);
# presentation mode: larger text for the room (the plots scale their own fonts). One element either way: the
# page's elements keep their places (a component that moves is a new iframe,
# docs/design.md#78-a-component-that-moves-is-a-new-iframe).
MAIN = "[data-testid='stMainBlockContainer']"
# presentation mode: the page from the top of the screen (the header, which would cover it, transparent; its
# button that opens the sidebar stays), a compact lesson bar, and larger text for the room.
PRESENT_CSS = (f"{MAIN} {{ padding-top: 0.75rem; padding-bottom: 0.5rem; }} "
               f"{MAIN} p, {MAIN} li {{ font-size: 1.2rem; }} "
               f"{MAIN} [data-testid='stAlert'] p {{ font-size: 1rem; }} "
               "[data-testid='stHeader'] { background: transparent; } "
               "[data-testid='stHeader'], [data-testid='stHeader'] * { pointer-events: none; } "
               "[data-testid='stHeader'] button, [data-testid='stHeader'] button * { pointer-events: auto; } "
               ".st-key-lesson-bar { padding: 0.3rem 0.75rem; } .st-key-lesson-bar button { min-height: 2.1rem; }")
st.html(f"<style>{MAIN} {{ padding-top: 2.5rem; }}</style>" if not present else f"<style>{PRESENT_CSS}</style>")
page = st.navigation(list(PAGES.values()))
# One browser-history entry per action of the reader (in the sidebar, which every state draws: nothing moves)
st.sidebar.html(f"<script>{HISTORY_JS.read_text()}</script>", unsafe_allow_javascript=True)
st.sidebar.caption("CEM Lab · a companion to arXiv 2605.07588 (Causal Energy Minimization)")
teacher_mode()
lesson_mode.sidebar()
lesson_mode.start(PAGES)
lesson_mode.bar()
page.run()
