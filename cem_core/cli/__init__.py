"""Command line: ``python -m cem_core info | gp train|sweep|report|inspect | lm train|compare|sweep|inspect |
models list|train | bench | figures``, one module per command group.

Every flag has a help text (``--help``); choices and defaults come from the configs and constants
they set, so the command line cannot disagree with them."""
from __future__ import annotations

import argparse
import errno
import os
import sys

import torch.distributed as dist

from . import bench, figures, gp, info, lm, models


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cem_core", description="CEM Lab command line")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (info.add_info, gp.add_gp, lm.add_lm, models.add_models, bench.add_bench, figures.add_figures):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except (ValueError, ConnectionError, FloatingPointError) as err:
        print(f"error: {err}", file=sys.stderr)
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
