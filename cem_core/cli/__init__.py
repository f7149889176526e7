"""Command line: ``python -m cem_core info | gp train|sweep|report|inspect | lm train|compare|sweep|inspect |
models list|train | bench | figures | site | docs``, one module per command group.

Every flag has a help text (``--help``); choices and defaults come from the configs and constants
they set, so the command line cannot disagree with them."""
from __future__ import annotations

import argparse
import errno
import importlib
import importlib.metadata
import os
import re
import sys

import torch.distributed as dist

# Each command group: its module, the function that adds its flags and commands, its help, and the extra of
# pyproject.toml it needs beyond the library's own dependencies (None: none). A group's module is imported only
# when that group runs, so `pip install -e .` alone runs --help, info, gp and bench; a group whose extra is
# missing says which, in one line.
GROUPS = {
    "info": ("info", "add_info", "parameter counts and KV-cache size: Llama vs CEM variants", None),
    "gp": ("gp", "add_gp", "Gaussian-process in-context regression", None),
    "lm": ("lm", "add_lm", "language models on SlimPajama (or the offline demo corpus)", "lm"),
    "models": ("models", "add_models", "the trained models kept in models/", "lm"),
    "bench": ("bench", "add_bench", "side-by-side timings: measured time ratios beside FLOP ratios", None),
    "figures": ("figures", "add_figures", "write the static figures (PNG and SVG) into a folder", "app"),
    "site": ("site", "add_site", "write the energy explorer as a static site that needs no install", "app"),
    "docs": ("docs", "add_docs", "rewrite the generated tables of docs/ from the committed results", "lm"),
}


class MissingExtra(ValueError):
    """A command group needs a package that is not installed (the message names the extra to install)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line, with the flags and commands of the group `command` (the others listed by name and help
    alone: their modules are not imported)."""
    parser = argparse.ArgumentParser(prog="python -m cem_core", description="CEM Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, add, help, extra) in GROUPS.items():
        group = sub.add_parser(name, help=help, description=help)
        if name == command:
            try:
                loaded = importlib.import_module(f"{__name__}.{module}")
            except ModuleNotFoundError as err:
                raise MissingExtra(needs(err.name, f"`python -m cem_core {name}`", extra)) from None
            getattr(loaded, add)(group)
    return parser


def needs(module: str | None, what: str, extra: str | None = None) -> str:
    """One line: `what` needs `module`, which is not installed, and the extra of cem-lab that installs it (read
    from the installed package's own metadata; `extra` when it has none, such as a checkout not installed)."""
    extras = {}
    try:
        for requirement in importlib.metadata.requires("cem-lab") or []:
            name, _, marker = requirement.partition(";")
            found = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", marker)
            package = re.split(r"[<>=!~\[ ]", name.strip())[0].lower().replace("-", "_")
            if found and package not in extras:
                extras[package] = found.group(1)
    except importlib.metadata.PackageNotFoundError:
        pass
    extra = extras.get((module or "").split(".")[0].lower(), extra) or "dev"
    return f"{what} needs the package {module!r}, which is not installed: pip install -e '.[{extra}]'"


def chosen(argv: list[str]) -> str | None:
    """The command group named in `argv` (its first word that is not a flag), if it is one."""
    words = [word for word in argv if not word.startswith("-")]
    return words[0] if words and words[0] in GROUPS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(chosen(argv))
    except MissingExtra as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except (ValueError, ConnectionError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:          # an extra's package, imported where it is used
        print(f"error: {needs(err.name, 'this command')}", file=sys.stderr)
        return 2
    except OSError as err:                      # a file or folder the system refuses: no permission, disk full, ...
        full = err.errno == errno.ENOSPC
        print(f"error: {err.filename or ''}: {err.strerror or err}" + (
            "; free space on that disk, then run the same command again: a run resumes from its last checkpoint"
            if full else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: what was checkpointed or recorded is kept (none before the first checkpoint); run the "
              "same command again to resume from it", file=sys.stderr)
        return 130


def exit_process(code: int) -> None:
    """End this process with `code`. A torchrun rank leaves without the interpreter's shutdown: gloo's
    worker threads still hold the tensors of their last collectives, and freeing those while Python
    shuts down aborts the process now and then ("terminate called without an active exception",
    pytorch/pytorch#179291; 6 runs in 100 here). Every result file is already written and closed."""
    if dist.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
