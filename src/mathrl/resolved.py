"""`Task`: an adapter with every optional member resolved, and the calls the loop makes on it.

For: the loop, the fake backend and `check_adapter`, which never ask an
adapter whether it has a member: `as_task` checks each optional member once
and fills in its documented default (`mathrl.adapter.Adapter`). Not for: the
contract itself (`mathrl.adapter`).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar

from mathrl.adapter import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_STOP,
    HELDOUT_STEP,
    Adapter,
    AdapterError,
    Prompt,
    Response,
)
from mathrl.backend import Tokenizer
from mathrl.problem_keys import problem_key
from mathrl.problem_keys import prompt_key as prompt_key
from mathrl.text import shown
from mathrl.tools import TOOL_TURNS, Toolbox, toolbox_of

P = TypeVar("P")
OptionValue: TypeAlias = str | int | float | bool
"""What a task option may be: it goes into JSON records and checkpoint fingerprints."""

TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""What a task name may be: it goes into file names and checkpoint names."""
REQUIRED = (
    "build_dataset",
    "make_prompt",
    "compute_reward",
    "reference_completion",
    "evaluate",
)
OPTIONAL_METHODS = (
    "heldout_dataset",
    "compute_group_rewards",
    "wrong_completions",
    "final_answer",
    "metrics",
    "feedback",
    "reference_turn",
    "preflight",
    "prepare",
)
MAX_TURNS = 100
"""The most turns an episode may declare."""


@dataclass(frozen=True, slots=True)
class Task(Generic[P]):
    """An adapter with every optional member resolved: its own, or the default."""

    adapter: Adapter[P]
    name: str
    stop: tuple[str, ...] | None
    """The declared stop sequences; None: the default, which depends on the prompt."""
    max_tokens: int
    identity: str
    """`module:QualifiedClass` of the adapter, for run records and messages."""
    version: str = ""
    """The declared version, or a hash of the source of the adapter's module."""
    chat_template_options: Mapping[str, Any] = field(default_factory=dict)
    mask_truncated: bool = False
    max_turns: int = 1
    episode_tokens: int | None = None
    """The declared budget of an episode's tokens after its prompt; None: the default."""
    work_in_processes: bool = False
    """Run each reward and feedback call in a process of its own (work that holds the GIL)."""
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    """The settings the task was built with (see `Adapter`'s `options`)."""
    data: Mapping[str, str] = field(default_factory=dict)
    """The digest of each source of data the task reads, by name (see `Adapter`'s `data`)."""
    cut_off_graded: str | None = None
    """Why a completion cut off at the token limit still earns its reward, if it does."""
    toolbox: Toolbox | None = None
    """The task's tools and their settings (`mathrl.tools`), or None: it has none."""

    @property
    def declares_heldout(self) -> bool:
        """True when the adapter has its own `heldout_dataset`."""
        return callable(getattr(self.adapter, "heldout_dataset", None))

    @property
    def group_rewards(self) -> Callable[[list[Response], P], Any] | None:
        """The adapter's `compute_group_rewards` (plain or `async`), or None.

        Optional in the contract, so not on the `Adapter` type: found here, once,
        for everything that calls it.
        """
        method = getattr(self.adapter, "compute_group_rewards", None)
        return method if callable(method) else None

    @property
    def feedback(self) -> Callable[[P, Sequence[Response]], Any] | None:
        """The adapter's `feedback` (its environment), or None for a one-turn task."""
        method = getattr(self.adapter, "feedback", None)
        return method if callable(method) else None

    @property
    def final_answer(self) -> Callable[[Response], str | None] | None:
        """The adapter's `final_answer`, or None: the task names no answers (no maj@k)."""
        method = getattr(self.adapter, "final_answer", None)
        return method if callable(method) else None

    @property
    def metrics(self) -> Callable[[Response, P], Any] | None:
        """The adapter's `metrics`, or None: the task reports no metrics beside its reward."""
        method = getattr(self.adapter, "metrics", None)
        return method if callable(method) else None

    @property
    def rewards_groups(self) -> bool:
        """True when the adapter scores whole groups (`compute_group_rewards`)."""
        return self.group_rewards is not None

    @property
    def plays_episodes(self) -> bool:
        """True when the adapter's environment answers the model (`feedback`, or its tools)."""
        return self.feedback is not None or self.toolbox is not None

    def episode_budget(self, max_tokens: int) -> int:
        """The tokens an episode may add after its prompt, at `max_tokens` a turn."""
        if self.episode_tokens is not None:
            return self.episode_tokens
        return 2 * self.max_turns * max_tokens

    def reference_turn(self, problem: P, responses: Sequence[Response]) -> str:
        """The reference of the model's turn after `responses` (see `Adapter`)."""
        own: Callable[[P, Sequence[Response]], str] | None = getattr(
            self.adapter, "reference_turn", None
        )
        if own is not None and responses:
            return own(problem, responses)
        return self.adapter.reference_completion(problem)

    def preflight(self) -> str | None:
        """The adapter's `preflight()`: a line on what it relies on, or None; may raise
        `Unavailable` (see `Adapter`)."""
        own: Callable[[], str | None] | None = getattr(self.adapter, "preflight", None)
        return own() if own is not None else None

    def prepare(self, tokenizer: Tokenizer, max_tokens: int) -> str | None:
        """The adapter's `prepare(tokenizer, max_tokens)`: a line on its data, or None; may
        raise `OptionError` for data it cannot use (see `Adapter`)."""
        own: Callable[[Tokenizer, int], str | None] | None = getattr(self.adapter, "prepare", None)
        return own(tokenizer, max_tokens) if own is not None else None

    def stop_for(self, prompt: Prompt) -> tuple[str, ...]:
        """The stop sequences of a completion of `prompt`."""
        if self.stop is not None:
            return self.stop
        return DEFAULT_STOP if isinstance(prompt, str) else ()

    def heldout(self, seed: int, size: int) -> list[P]:
        """The task's held-out problems (see `Adapter`'s optional members)."""
        own: Callable[[int, int], list[P]] | None = getattr(self.adapter, "heldout_dataset", None)
        if own is not None:
            return own(seed, size)
        return self.adapter.build_dataset(seed, HELDOUT_STEP, size)

    def wrong_completions(self, problem: P) -> Sequence[str]:
        """The adapter's plausible wrong answers for `problem` (none by default)."""
        own: Callable[[P], Sequence[str]] | None = getattr(self.adapter, "wrong_completions", None)
        return own(problem) if own is not None else ()

    def training_problems(self, seed: int, steps: int, batch: int) -> set[str]:
        """The problems (as `problem_key`s) of training steps 1 to `steps` at `batch` a step.

        Held-out problems must avoid these: the loop leaves out those that do
        not, and `mathrl.testing` reports them. Problems, not prompts: problems
        may share a prompt (a game whose secret it hides).
        """
        return {
            problem_key(self.adapter, p)
            for step in range(1, steps + 1)
            for p in self.adapter.build_dataset(seed, step, batch)
        }


def as_task(adapter: Adapter[P] | Task[P]) -> Task[P]:
    """Resolve an adapter's optional members; raise AdapterError for malformed ones."""
    if isinstance(adapter, Task):
        return adapter
    cls = type(adapter)
    label = cls.__name__
    missing = [m for m in REQUIRED if not callable(getattr(adapter, m, None))]
    if missing:
        raise AdapterError(
            f"{label} is not an adapter: it has no {', '.join(missing)} "
            f"(an adapter needs {', '.join(REQUIRED)})"
        )
    name = getattr(adapter, "name", None)
    if name is None:
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", cls.__name__).lstrip("_.-")[:64] or "task"
    elif not (isinstance(name, str) and TASK_NAME.fullmatch(name)):
        raise AdapterError(
            f"{label}.name must be 1 to 64 characters from A-Z a-z 0-9 _ . -, "
            f"starting with a letter or digit (got {shown(name)})"
        )
    stop = getattr(adapter, "stop", None)
    if stop is not None and not (
        isinstance(stop, tuple | list) and all(isinstance(s, str) and s for s in stop)
    ):
        raise AdapterError(
            f"{label}.stop must be a tuple of non-empty strings, e.g. ('\\n',) "
            f"or () (got {shown(stop)})"
        )
    max_tokens = getattr(adapter, "max_tokens", DEFAULT_MAX_TOKENS)
    if not (_is_int(max_tokens) and max_tokens >= 1):
        raise AdapterError(f"{label}.max_tokens must be an integer >= 1 (got {shown(max_tokens)})")
    for method in OPTIONAL_METHODS:
        value = getattr(adapter, method, None)
        if value is not None and not callable(value):
            raise AdapterError(f"{label}.{method} must be a method (got {shown(value)})")
    version = getattr(adapter, "version", None)
    if version is not None and not (isinstance(version, str) and 0 < len(version) <= 200):
        raise AdapterError(f"{label}.version must be a non-empty string (got {shown(version)})")
    template = getattr(adapter, "chat_template_options", {})
    if not (isinstance(template, Mapping) and all(isinstance(k, str) for k in template)):
        raise AdapterError(
            f"{label}.chat_template_options must map option names to values, e.g. "
            f"{{'enable_thinking': False}} (got {shown(template)})"
        )
    if "tools" in template:
        raise AdapterError(
            f"{label}.chat_template_options must not set tools: declare them as {label}.tools, "
            "which also reads and answers the model's calls"
        )
    toolbox = toolbox_of(adapter, label)
    if toolbox is not None:  # the chat template renders them, as the model was trained on
        template = {**template, "tools": toolbox.schemas}
    mask = getattr(adapter, "mask_truncated", False)
    if not isinstance(mask, bool):
        raise AdapterError(f"{label}.mask_truncated must be True or False (got {shown(mask)})")
    max_turns = getattr(adapter, "max_turns", 1 if toolbox is None else TOOL_TURNS)
    if not (_is_int(max_turns) and 1 <= max_turns <= MAX_TURNS):
        raise AdapterError(
            f"{label}.max_turns must be an integer from 1 to {MAX_TURNS} (got {shown(max_turns)})"
        )
    if max_turns > 1 and toolbox is None and not callable(getattr(adapter, "feedback", None)):
        raise AdapterError(
            f"{label}.max_turns is {max_turns} but {label} has no feedback method nor tools: "
            "an episode of several turns needs the environment's feedback after each"
        )
    episode_tokens = getattr(adapter, "episode_tokens", None)
    if episode_tokens is not None and not (_is_int(episode_tokens) and episode_tokens >= 1):
        raise AdapterError(
            f"{label}.episode_tokens must be an integer >= 1 (got {shown(episode_tokens)})"
        )
    processes = getattr(adapter, "work_in_processes", False)
    if not isinstance(processes, bool):
        raise AdapterError(
            f"{label}.work_in_processes must be True or False (got {shown(processes)})"
        )
    options = getattr(adapter, "options", {})
    if not (
        isinstance(options, Mapping)
        and all(isinstance(k, str) and _is_option_value(v) for k, v in options.items())
    ):
        raise AdapterError(
            f"{label}.options must map option names to strings, integers, finite numbers or "
            f"True/False, e.g. {{'few_shot': 2}} (got {shown(options)})"
        )
    data = getattr(adapter, "data", {})
    if not (
        isinstance(data, Mapping)
        and all(
            isinstance(k, str) and isinstance(v, str) and 0 < len(v) <= 200 for k, v in data.items()
        )
    ):
        raise AdapterError(
            f"{label}.data must map each source's name to a digest of its content, e.g. "
            f"{{'train': '3f2a9c0d1e4b5a6f'}} (got {shown(data)})"
        )
    cut_off = getattr(adapter, "cut_off_graded", None)
    if cut_off is not None and not (isinstance(cut_off, str) and cut_off.strip()):
        raise AdapterError(
            f"{label}.cut_off_graded must say why a completion cut off at the token limit "
            f"still earns its reward (got {shown(cut_off)})"
        )
    identity = identity_of(cls)
    return Task(
        adapter,
        name,
        tuple(stop) if stop is not None else None,
        max_tokens,
        identity,
        version if version is not None else _source_hash(cls),
        dict(template),
        mask,
        max_turns,
        episode_tokens,
        processes,
        dict(options),
        dict(data),
        cut_off,
        toolbox,
    )


def _is_option_value(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str | int | bool)


def identity_of(cls: type) -> str:
    """`module:QualifiedClass` of an adapter's class, by the name it goes by: a class that its
    module's package exports under its own name goes by the package (and so on up), as a user
    imports it (`mathrl.tasks.code:CodeAdapter`, though the class is defined in
    `mathrl.tasks.code.task`), so messages, records and `tasks` agree."""
    module = cls.__module__
    while "." in module and "." not in cls.__qualname__:
        package = module.rpartition(".")[0]
        if getattr(sys.modules.get(package), cls.__name__, None) is not cls:
            break
        module = package
    return f"{module}:{cls.__qualname__}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _source_hash(cls: type) -> str:
    """8 hex digits of the source of the modules that define `cls` and its bases.

    The module, not just the class: a task's helpers and constants (its
    held-out split, say) change what it trains on as much as its methods do.
    """
    sources = []
    for module in dict.fromkeys(k.__module__ for k in cls.__mro__):
        if module in ("builtins", "typing", "abc"):
            continue
        try:
            sources.append(inspect.getsource(sys.modules[module]))
        except (KeyError, OSError, TypeError):  # made in a REPL: its name stands in
            sources.append(module)
    return hashlib.blake2b("\n".join(sources).encode(), digest_size=4).hexdigest()
