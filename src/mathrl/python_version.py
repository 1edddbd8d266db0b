"""The Python mathrl needs, checked as mathrl is imported: 3.11 or newer.

For: one clear line on an older Python, before a module that needs 3.11 fails
in its own words (a SyntaxError, or an ImportError of `tomllib`). pip already
refuses to install mathrl there (pyproject's `requires-python`); this is for a
clone put on the path by hand. Not for: anything else. It runs on any Python
from 3.6 on, so it uses nothing newer (not even postponed annotations).
"""

import sys

OLDEST = (3, 11)
"""As pyproject.toml's `requires-python` (a test checks that they agree)."""


def check_python(version: "tuple[int, ...]" = tuple(sys.version_info[:3])) -> None:
    """ImportError, one line, unless `version` (this Python's) is OLDEST or newer."""
    if tuple(version[:2]) < OLDEST:
        needed, this = ".".join(map(str, OLDEST)), ".".join(map(str, version))
        raise ImportError(f"mathrl needs Python {needed} or newer (this is Python {this})")


check_python()
