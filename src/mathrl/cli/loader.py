"""Load a task from a `module:Class` spec, as `--adapter` takes it.

For: the command line, which trains, samples and checks any task by name.
Not for: checking that the task behaves (`mathrl.testing` does that); this
only checks that it is shaped like an adapter.

What the command line asks of a task (`TaskOptions`, e.g. `--weak-sandbox`)
reaches it as a keyword of its constructor, for a task that takes that
keyword (`TASK_KEYWORDS`); a task that does not is made as usual, and the
command line says that the setting changes nothing for it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mathrl.adapter import AdapterError, OptionError
from mathrl.cli.settings import BY_FIELD, TaskOptions, adapter_spec_shown
from mathrl.cli.task_args import FLAG, converted, task_options_of
from mathrl.config import ConfigError
from mathrl.resolved import Task, as_task
from mathrl.tasks import BUILT_IN
from mathrl.text import closest, describe, shown

TASK_KEYWORDS = {"weak_sandbox": "allow_missing_layers"}
"""Each field of `TaskOptions` -> the constructor keyword of the tasks that take it."""
CLI_KEYWORDS = frozenset(TASK_KEYWORDS.values())
"""Constructor keywords the command line sets from its own settings, not from --task-arg."""
_LOADED: dict[str, list[str]] = {}
"""Each task this process loaded, by identity: how `check-adapter` is told to load it again."""


def opt_in(allowed_by: object) -> str | None:
    """How the command line gives a task the option `allowed_by` (a constructor keyword of
    `TASK_KEYWORDS`, as `Unavailable.allowed_by` and `TaskError.allowed_by` name it), e.g.
    "--weak-sandbox (or MINT_RL_WEAK_SANDBOX=1)"; None for anything else."""
    for name, keyword in TASK_KEYWORDS.items():
        if keyword == allowed_by:
            setting = BY_FIELD[name]
            return f"{setting.flag} (or {setting.env}=1)"
    return None


def load_task(
    spec: str,
    source: str = "--adapter",
    options: TaskOptions | None = None,
    note: Callable[[str], None] = lambda line: None,
    task_args: Mapping[str, object] | None = None,
) -> Task[Any]:
    """Import `module:Name` and resolve it as a task; ConfigError (one line) if it cannot be.

    `spec` is a built-in task's short name (`mathrl.tasks.BUILT_IN`), or
    `module:Name`: `module` a module name importable from the working folder
    or PYTHONPATH, or a path to a `.py` file; `Name` a class (instantiated
    with no arguments but the `options` it takes, by `TASK_KEYWORDS`' names),
    an adapter instance, or a function returning one (called alike). `note`
    hears, in one line, of each option asked for that the task does not take.
    `task_args` are the task's own options (`mathrl.cli.task_args`), as text
    from `--task-arg` or as a run recorded them.
    """
    named, target = spec, task_target(spec, source)
    made = callable(target) and not _looks_like_adapter(target)
    given = asdict(options) if options is not None else {}
    asked = {TASK_KEYWORDS[name]: value for name, value in given.items() if value}
    keywords: dict[str, Any] = {k: v for k, v in asked.items() if made and _takes(target, k)}
    if task_args and not made:
        raise ConfigError(
            f"{FLAG}: {named} is a task already made, which takes no options (got "
            f"{', '.join(task_args)}); give its class instead"
        )
    if task_args:
        keywords.update(converted(task_options_of(target), task_args, named))
    try:
        adapter = target(**keywords) if made else target
    except OptionError as exc:
        message = str(exc)
        said = message if message.startswith(exc.option) else f"{exc.option}: {message}"
        raise ConfigError(f"{FLAG} {said}") from None
    except Exception as exc:
        raise ConfigError(
            f"{source}: {spec} could not be created ({type(exc).__name__}: {describe(exc)})"
        ) from None
    try:
        task = as_task(adapter)
    except AdapterError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    _LOADED[task.identity] = [
        spec,
        *(w for k, v in (task_args or {}).items() for w in ("--task-arg", f"{k}={_text(v)}")),
        *(BY_FIELD[name].flag for name, keyword in TASK_KEYWORDS.items() if keyword in asked),
    ]
    for name, keyword in TASK_KEYWORDS.items():
        if keyword in asked and keyword not in keywords:
            setting = BY_FIELD[name]
            note(
                f"note: {setting.flag} ({setting.env}) changes nothing for task {task.name!r}: "
                f"it takes no {keyword} option"
            )
    return task


def recorded_spec(spec: str) -> str:
    """`spec` as a run folder records it, so the run works from any folder: a file's path made
    absolute (`task.py:Task` -> `/home/me/task.py:Task`), and a module found in the working
    folder given as its file; a built-in name, or a module importable from anywhere, as it is."""
    module_name, sep, attr = spec.partition(":")
    if not sep or spec in BUILT_IN:
        return spec
    if module_name.endswith(".py"):
        return f"{os.path.abspath(module_name)}:{attr}"
    local = Path.cwd() / f"{module_name}.py"  # what `python -m` imports first, from here
    if "." not in module_name and local.is_file():
        return f"{local.absolute()}:{attr}"
    return spec  # a package's module, or one importable from anywhere: found as it was


def check_command(identity: str) -> str:
    """The command that checks the task `identity` names as this process loaded it: its spec
    as given (a file's path, say), its options and what was asked of it, so it runs as
    printed; just the identity for a task this process did not load."""
    words = ["python", "-m", "mathrl", "check-adapter", *_LOADED.get(identity, [identity])]
    return shlex.join(words)


def _text(value: object) -> str:
    """An option's value as `--task-arg` reads it back."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def task_target(spec: str, source: str) -> Any:
    """What `spec` names: a built-in task's name, or `module:Name` (see `load_task`), imported;
    ConfigError (one line) if it cannot be."""
    spec = BUILT_IN[spec][0] if spec in BUILT_IN else spec
    module_name, sep, attr = spec.partition(":")
    if not (sep and module_name and attr and ":" not in attr):
        guess = closest(spec, BUILT_IN) if not sep else None
        raise ConfigError(
            f"{source} must be {', '.join(BUILT_IN)} or module:Class, e.g. mymod:MyTask "
            f"(got {adapter_spec_shown(spec)}){f'; did you mean {guess}?' if guess else ''}"
        )
    module = _import(module_name, source)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(
                f"{source}: module {module_name!r} has no attribute {attr!r} (got {shown(spec)})"
            )
        target = getattr(target, part)
    return target


def load_recorded_task(
    spec: str,
    source: str,
    recorded: Mapping[str, object],
    given: Mapping[str, str],
    where: str,
    options: TaskOptions | None = None,
    note: Callable[[str], None] = lambda line: None,
) -> Task[Any]:
    """The task a run recorded, built again with its recorded options (`recorded`); options
    `given` now must come to the same task (ConfigError naming both otherwise)."""
    task = load_task(spec, source, options, note, {**recorded, **given})
    if given and dict(task.options) != dict(recorded):
        kept = ", ".join(f"{k}={v}" for k, v in recorded.items()) or "none"
        raise ConfigError(
            f"{FLAG} {', '.join(f'{k}={v}' for k, v in given.items())} cannot be given with "
            f"{where}: it records the task's options ({kept}); leave it out"
        )
    return task


def _takes(target: Callable[..., Any], keyword: str) -> bool:
    """True if `target` (a class or a function) has a parameter named `keyword`."""
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin, say): it takes none
        return False
    found = parameters.get(keyword)
    return found is not None and found.kind in (found.POSITIONAL_OR_KEYWORD, found.KEYWORD_ONLY)


def _looks_like_adapter(obj: Any) -> bool:
    return not isinstance(obj, type) and callable(getattr(obj, "compute_reward", None))


def _import(module_name: str, source: str) -> Any:
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ConfigError(f"{source}: no such file {module_name!r}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"{source}: cannot import {module_name!r} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        loader = spec.loader

        def run_file() -> Any:
            loader.exec_module(module)
            return module

        return _run_import(run_file, module_name, source)
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as `python -m` does: tasks next to you import
    return _run_import(lambda: importlib.import_module(module_name), module_name, source)


def _run_import(load: Callable[[], Any], module_name: str, source: str) -> Any:
    try:
        return load()
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and not module_name.removesuffix(".py").startswith(missing):
            # The task's module was found; something it imports was not.
            raise ConfigError(
                f"{source}: importing {module_name!r} failed: it imports {missing!r}, which is "
                f"not installed ({describe(exc)}); install it, e.g. pip install {missing}"
            ) from None
        raise ConfigError(
            f"{source}: cannot import module {module_name!r} ({describe(exc)}; "
            "run from the folder that holds it, or add that folder to PYTHONPATH)"
        ) from None
    except Exception as exc:  # the module's own code failed: still one line
        raise ConfigError(
            f"{source}: importing {module_name!r} failed ({type(exc).__name__}: {describe(exc)})"
        ) from None
