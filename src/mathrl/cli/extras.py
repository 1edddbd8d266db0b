"""How to install one of mathrl's extras (`plot`, `wandb`), for the way mathrl was installed.

For: the command line's message when an extra is missing. mathrl is installed
from a clone (`pip install .`) more often than from an index, and
`pip install 'mathrl[plot]'` would then ask an index for a package that may
not be there, or be another one. pip records where an install came from
(PEP 610, `direct_url.json`): a folder or a file gives
`pip install '<it>[plot]'` (`'.[plot]'` when it is the working folder);
anything else gives `pip install 'mathrl[plot]'`. A library message (a task's,
say) names an extra as `pip install 'mathrl[math]'`, as its own users install
it; `as_installed` says it the command line's way.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname


def install_command(extra: str) -> str:
    """The pip command that adds `extra` to the mathrl installed here."""
    try:
        direct_url = distribution("mathrl").read_text("direct_url.json")
    except PackageNotFoundError:  # run from a clone's src/ on the path, not installed
        direct_url = None
    return command_for(extra, direct_url, Path.cwd())


def command_for(extra: str, direct_url: str | None, cwd: Path) -> str:
    """`install_command`, from pip's record of where mathrl came from (None: an index)."""
    target = "mathrl"
    try:
        url = json.loads(direct_url)["url"] if direct_url else ""
    except (ValueError, KeyError, TypeError):  # not what PEP 610 says: the index's name
        url = ""
    parts = urlsplit(url)
    if parts.scheme == "file" and not parts.netloc:
        source = Path(url2pathname(parts.path))
        target = "." if source == cwd else str(source)
    return f"pip install {shlex.quote(f'{target}[{extra}]')}"


_NAMED = re.compile(r"pip install '?mathrl\[([A-Za-z0-9_-]+)\]'?")


def as_installed(message: str) -> str:
    """`message` with each `pip install 'mathrl[EXTRA]'` in it as `install_command(EXTRA)`."""
    if "mathrl[" not in message:
        return message
    return _NAMED.sub(lambda found: install_command(found[1]), message)
