"""The command line: every flag explains itself, and its choices and defaults come from the configs
and constants it sets (so the two cannot disagree)."""
import argparse
from dataclasses import fields

import pytest

from cem_core.cli import GROUPS, build_parser
from cem_core.cli.options import cem_options
from cem_core.nn.config import CEMOptions, switches


def _parsers(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for action in parser._actions:                      # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


# every command's parser: each group's as the command line builds it when that group is named
PARSERS = {" ".join(path) or "(top)": parser for group in GROUPS for path, parser in _parsers(build_parser(group))
           if not path or path[0] == group}


@pytest.mark.parametrize("command", list(PARSERS))
def test_every_flag_has_help(command):
    for action in PARSERS[command]._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        assert action.help and len(action.help) > 10, f"{command}: {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("command", ["info", "gp train", "lm train", "lm compare"])
def test_cem_flags_come_from_cem_options(command):
    """Every CEMOptions field is a flag of info, gp train, lm train and lm compare (lm train and compare offered
    only --T), its choices and default from the field; info and the LM commands keep each variant's own."""
    actions = {a.dest: a for a in PARSERS[command]._actions}
    for f in switches():
        action = actions[f.name]
        assert action.default == (f.default if command == "gp train" else argparse.SUPPRESS)   # else each variant's
        if f.metadata["kind"] == "choice":
            assert tuple(action.choices) == tuple(f.metadata["allowed"])
    args = PARSERS[command].parse_args(["--T", "3", "--diagonal", "shared", "--eta-mode", "learned"])
    assert cem_options(args) == CEMOptions(T=3, diagonal="shared", eta_mode="learned")
    assert {f.name for f in fields(CEMOptions)} <= set(actions)


def test_lm_cem_flags_change_each_cem_variant_and_leave_llama_as_it_is():
    """`lm train` and `lm compare` take every CEM switch: each CEM variant applies it over its own switches (T
    keeps its own field, so earlier runs keep their hashes); Llama, in a comparison, is trained as it is, and
    named alone it refuses them."""
    from cem_core.cli.lm import _cem_switches, _lm_overrides
    from cem_core.experiments.lm.train_config import LMTrainConfig

    args = PARSERS["lm compare"].parse_args(["--T", "3", "--diagonal", "shared", "--preconditioner", "psd"])
    switches_given, overrides = _cem_switches(args), _lm_overrides(args)
    assert switches_given == {"diagonal": "shared", "preconditioner": "psd"} and overrides["T"] == 3
    full = LMTrainConfig.from_preset("cpu-tiny", variant="cem-full", cem_switches=switches_given, **overrides)
    assert full.cem_options() == CEMOptions(T=3, diagonal="shared", preconditioner="psd")   # cem-full's dlr replaced
    attn = LMTrainConfig.from_preset("cpu-tiny", variant="cem-attn", cem_switches=switches_given, **overrides)
    assert attn.cem_options() == CEMOptions(T=3, diagonal="shared", preconditioner="psd")
    plain = PARSERS["lm train"].parse_args(["--T", "2"])
    given = LMTrainConfig.from_preset("cpu-tiny", variant="cem-attn", cem_switches=_cem_switches(plain),
                                      **_lm_overrides(plain))
    assert given == LMTrainConfig.from_preset("cpu-tiny", variant="cem-attn", T=2)       # the same run, as before
    with pytest.raises(ValueError, match="applies to CEM layers only"):
        LMTrainConfig.from_preset("cpu-tiny", variant="llama", cem_switches=switches_given)


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


@pytest.mark.slow                      # a fresh virtual environment: about a minute of pip
def test_the_library_install_alone_runs_the_core_commands(tmp_path):
    """`pip install -e .` (torch, numpy, psutil, tqdm and nothing else) used to fail at `python -m cem_core --help`
    on a missing zstandard: the command line imported every group, and the LM data reader its packages, at
    start. Now --help, info, gp train and bench run, and a command that needs an extra says which, in one line."""
    import subprocess
    import sys

    from conftest import ROOT

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    torch_pin = next(line.split()[0] for line in (ROOT / "requirements.txt").read_text().splitlines()
                     if line.startswith("torch=="))             # the CPU wheel, as docs/setup.md pins it
    subprocess.run([*pip, torch_pin], check=True, timeout=900)
    subprocess.run([*pip, "-e", str(ROOT)], check=True, timeout=900)

    def cem(*args):
        return subprocess.run([str(venv / "bin" / "python"), "-m", "cem_core", *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)

    for args in (["--help"], ["info"], ["gp", "train", "--steps", "2"], ["bench", "--help"], ["lm", "train", "--help"]):
        done = cem(*args)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr[-2000:])
    assert "held-out RMSE" in cem("gp", "train", "--steps", "2").stdout
    done = cem("figures", "--out", str(tmp_path / "figures"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: this command needs the package 'matplotlib', which is not installed: pip install -e '.[app]'"]
