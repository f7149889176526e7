"""``python -m cem_core``: the command line (``cem_core.cli``)."""
from cem_core.cli import exit_process, main

if __name__ == "__main__":
    exit_process(main())
