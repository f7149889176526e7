"""``python -m cem_core site``: the energy explorer as a static site (cem_core.ui.site; docs/site.md)."""
from __future__ import annotations

from pathlib import Path


def add_site(site) -> None:
    """The flags of ``site``, on its parser."""
    site.add_argument("--out", default="build/site",
                      help="the folder (default build/site): a new or empty one, or an earlier site, which is replaced")
    site.set_defaults(run=write_site)


def write_site(args) -> int:
    from cem_core.ui.site import build, size
    index = build(Path(args.out))
    print(f"{index} ({size(index.parent) / 1e6:.1f} MB): open it in a browser, or serve the folder from any static "
          "host")
    return 0
