"""The command line: `python -m mathrl` and its commands, the run folder, progress and plots.

For: turning flags and the environment into a run, and a run into what a
person sees (the seed's stdout lines, a progress bar, a run folder). Not for:
the GRPO step (`mathrl.loop`) or talking to MinT (`mathrl.service`).
"""

from mathrl.cli.commands import main

__all__ = ["main"]
