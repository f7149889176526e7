"""The app's pages, in one place: ``app.py`` builds its navigation from them, ``links`` its URLs and the
notebooks each page names, and the tests walk them. A new page is a module under app_pages/ and one entry here."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AppPage:
    key: str                           # how the code names the page ("energy")
    file: str                          # its module, from the repository root
    title: str                         # the navigation's and the page's title
    icon: str
    path: str                          # its URL path ("" for the default page)
    notebooks: tuple                   # the notebooks that derive or read what it shows


APP_PAGES = (
    AppPage("energy", "app_pages/energy.py", "Energy descent", ":material/trending_down:", "",
            ("00_lecture", "01_attention_from_energy", "02_gated_mlp_from_energy", "03_design_space")),
    AppPage("design", "app_pages/design_space.py", "Design space", ":material/tune:", "design", ("03_design_space",)),
    AppPage("gp", "app_pages/gp_recursion.py", "GP recursion", ":material/show_chart:", "gp",
            ("04_gp_recursion", "05_what_the_evidence_says")),
    AppPage("lm", "app_pages/mini_lm.py", "Mini language model", ":material/description:", "lm",
            ("05_what_the_evidence_says",)),
    AppPage("inside", "app_pages/inside.py", "Inside a trained model", ":material/biotech:", "inside",
            ("06_inside_a_trained_model", "04_gp_recursion", "05_what_the_evidence_says")),
)
