"""The command line: every flag explains itself, and its choices and defaults come from the configs
and constants it sets (so the two cannot disagree)."""
import argparse
from dataclasses import fields

import pytest

from cem_core.cli import build_parser
from cem_core.cli.options import cem_options
from cem_core.nn.config import CEMOptions, switches


def _parsers(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for action in parser._actions:                      # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


PARSERS = dict((" ".join(path) or "(top)", parser) for path, parser in _parsers(build_parser()))


@pytest.mark.parametrize("command", list(PARSERS))
def test_every_flag_has_help(command):
    for action in PARSERS[command]._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        assert action.help and len(action.help) > 10, f"{command}: {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("command", ["info", "gp train"])
def test_cem_flags_come_from_cem_options(command):
    actions = {a.dest: a for a in PARSERS[command]._actions}
    for f in switches():
        action = actions[f.name]
        assert action.default == (argparse.SUPPRESS if command == "info" else f.default)   # info: each variant's
        if f.metadata["kind"] == "choice":
            assert tuple(action.choices) == tuple(f.metadata["allowed"])
    args = PARSERS[command].parse_args(["--T", "3", "--diagonal", "shared", "--eta-mode", "learned"])
    assert cem_options(args) == CEMOptions(T=3, diagonal="shared", eta_mode="learned")
    assert {f.name for f in fields(CEMOptions)} <= set(actions)


def test_a_bad_cem_flag_is_refused_by_the_options_object(capsys):
    from cem_core.__main__ import main
    assert main(["info", "--T", "0"]) == 2
    assert "T=0 is invalid: must be in [1, 64]" in capsys.readouterr().err


def test_info_shows_each_variant_with_its_own_switches_unless_told(capsys):
    from cem_core.__main__ import main
    sizes = ["--d-model", "64", "--n-layers", "2", "--n-heads", "4", "--d-ff", "128"]
    assert main(["info", *sizes]) == 0
    own = capsys.readouterr().out
    assert "cem-full: T=2 diagonal=shared preconditioner=dlr" in own and "cem-attn: defaults" in own
    assert main(["info", *sizes, "--T", "3"]) == 0
    told = capsys.readouterr().out
    assert "cem-full: T=3 diagonal=shared preconditioner=dlr" in told and "cem-attn: T=3" in told
