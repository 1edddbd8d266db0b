"""`python -m mathrl sample`: a task's held-out problems, answered by saved weights.

For: looking at what a checkpoint does, greedily by default, on problems
training never drew: one line a problem, or, for a task that plays episodes,
its whole episode (each of the model's turns and the environment's reply to
it, numbered; a tool's reply as each call, its arguments and its result). It
refuses weights trained for another task, wherever the checkpoint's name or
file says which task that was.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mathrl.adapter import NoReference
from mathrl.backend import BackendError, Sampler, Tokenizer
from mathrl.checkpoints import task_of_checkpoint
from mathrl.cli.data import fake_tokenizer, prepared, refused_by_the_fake, say_line
from mathrl.cli.run_folder import RunFolderError, no_such_weights, run_record
from mathrl.cli.settings import advised, api_key, base_url
from mathrl.cli.train import model_line, retry_policy
from mathrl.config import Config, ConfigError
from mathrl.episodes import Episode
from mathrl.evaluation import distinct, evaluate
from mathrl.resolved import Task
from mathrl.service.retry import Retrier, RetryingSampler
from mathrl.text import REPLACEMENT, quoted, shown
from mathrl.workers import Workers


async def sample(
    config: Config,
    task: Task[Any],
    env: Mapping[str, str],
    model_path: str,
    count: int,
    say: Callable[[str], None],
) -> int:
    """Print one line per held-out problem and the accuracy; return the exit code."""
    if not model_path.strip():
        raise ConfigError("--model-path must be the path a run printed as `Saved:` (got '')")
    model_path = latest_of_run(model_path)
    _same_task(task, task_of_checkpoint(model_path), model_path)
    max_tokens = config.train.max_tokens or task.max_tokens

    def drawn() -> list[Any]:
        """The held-out problems, each once (drawn once the task's data is checked)."""
        problems, note = distinct(task, task.heldout(config.train.seed, count))
        if note is not None:
            say(advised(note, {"eval_problems": "--problems"}))
        return problems

    tokenizer: Tokenizer
    sampler: Sampler
    if config.backend == "fake":  # its tokenizer is known before it is made
        say_line(prepared(task, fake_tokenizer(), max_tokens), say)
        problems = drawn()
        tokenizer, sampler = await _fake_sampler(config, task, problems, model_path)
    else:
        endpoint_key, endpoint_url = api_key(env), base_url(env)
        if not model_path.startswith("tinker://"):
            raise ConfigError(
                f"--model-path must be a tinker:// path a run printed as `Saved:` "
                f"(got {shown(model_path, 200)})"
            )
        from mathrl.service.mint_backend import Endpoint, open_sampler

        endpoint = Endpoint(endpoint_key, endpoint_url)
        tokenizer, sampler = await open_sampler(config, endpoint, model_path)
        sampler = RetryingSampler(sampler, Retrier(retry_policy(config), say))
        say_line(prepared(task, tokenizer, max_tokens), say)
        problems = drawn()
    print(model_line(config, tokenizer.vocab_size), flush=True)
    greedy = config.train.temperature == 0
    with Workers(config.reward_workers, config.reward_timeout) as workers:
        result = await evaluate(
            tokenizer, sampler, task, config.train, problems, greedy=greedy, workers=workers
        )
    if task.plays_episodes:
        lines = _episode_lines(task, problems, result.episodes_P)
        answers = [str(turn.response) for e in result.episodes_P for turn in e.turns]
    else:
        lines = _lines(task, problems, result.texts_P, result.rewards_P)
        answers = list(result.texts_P)
    for line in lines:
        print(line)
    if _unprintable(answers):
        say(UNPRINTABLE)
    correct = round(result.accuracy * len(problems))
    print(f"Accuracy: {result.accuracy:.1%} ({correct}/{len(problems)})", flush=True)
    return 0


def latest_of_run(model_path: str) -> str:
    """`model_path` itself, or, for a run folder, the latest sampler checkpoint it records."""
    try:
        record = run_record(model_path)
    except RunFolderError as exc:
        raise ConfigError(f"--model-path: {exc}") from None
    if record is None:
        missing = no_such_weights(model_path)
        if missing is not None:  # before any key is asked for: a mistyped path needs none
            raise ConfigError(missing)
        return model_path
    samplers = [c["path"] for c in record.checkpoints if c["kind"] == "sampler"]
    if not samplers:
        raise ConfigError(
            f"--model-path: the run folder {record.path} records no sampler checkpoint"
        )
    return str(samplers[-1])


async def _fake_sampler(
    config: Config, task: Task[Any], problems: Sequence[Any], path: str
) -> tuple[Tokenizer, Sampler]:
    from mathrl_fakes import FakeBackend

    try:
        backend = FakeBackend.for_problems(task, problems, seed=config.train.seed)
    except NoReference as exc:
        raise refused_by_the_fake(task, exc, "sample") from None
    try:
        if os.path.isdir(path):
            raise BackendError(f"{path!r} is a folder")
        _same_task(task, backend.read(path, "sampler").get("task"), path)
        sampler = await backend.create_sampler(path)
    except BackendError as exc:
        raise ConfigError(
            f"--model-path must be a fake sampler checkpoint a run printed as `Saved:` ({exc})"
        ) from None
    return backend.tokenizer, sampler


def _same_task(task: Task[Any], trained: object, path: str) -> None:
    if isinstance(trained, str) and trained != task.name:
        raise ConfigError(
            f"--model-path {shown(path, 60)} holds weights trained on task {trained!r}, "
            f"not on task {task.name!r} (--adapter {task.identity}): pass the matching --adapter"
        )


def _lines(
    task: Task[Any], problems: Sequence[Any], texts: Sequence[str], rewards: Sequence[float]
) -> list[str]:
    """One line a problem: the question (what differs between prompts), answer, verdict."""
    lines = []
    for question, text, reward in zip(_questions(task, problems), texts, rewards, strict=True):
        lines.append(f"{question} -> {shown_completion(text)}: {_verdict(task, reward)}")
    return lines


RUN = 4
"""A run of this many of one unprintable character shows as one term: `'\\x00' * 37`."""
UNPRINTABLE = (
    "note: \\x00, \\ufffd and the like in quotes are characters that cannot be printed, shown "
    "as Python escapes (\\x00 is a NUL byte, \\ufffd bytes that are not UTF-8 text); a model "
    "that has not learned the task writes them"
)
"""What `sample` says once, on stderr, when an answer holds such characters."""


def shown_completion(text: str) -> str:
    """A completion as `sample` prints it: a Python expression of its text, quoted as `repr`
    quotes it, with each run of RUN or more of one unprintable character as one term
    (`'def f(s):' + '\\x00' * 37`): what a model wrote, whole, without a line of escapes."""
    terms: list[str] = []
    plain = ""
    for char, run in itertools.groupby(text):
        count = len(list(run))
        if count >= RUN and not printable(char):
            terms += [quoted(plain)] if plain else []
            terms.append(f"{quoted(char)} * {count}")
            plain = ""
        else:
            plain += char * count
    if plain or not terms:
        terms.append(quoted(plain))
    return " + ".join(terms)


def printable(char: str) -> bool:
    """True for a character a terminal shows as itself (not U+FFFD, which hides bytes)."""
    return char.isprintable() and char != REPLACEMENT


def _unprintable(texts: Sequence[str]) -> bool:
    """True if any text holds a character that is neither printable nor a newline or tab."""
    return any(not printable(c) and c not in "\n\t" for text in texts for c in text)


def _episode_lines(
    task: Task[Any], problems: Sequence[Any], episodes: Sequence[Episode]
) -> list[str]:
    """A problem's whole episode: the question and verdict, then each of the model's turns,
    numbered, each followed by the environment's reply to it (none after the last)."""
    lines = []
    for question, episode in zip(_questions(task, problems), episodes, strict=True):
        n = len(episode.turns)
        turns = f"{n} turn{'s' * (n != 1)}"
        lines.append(f"{question} -> {turns}: {_verdict(task, episode.reward)}")
        for number, turn in enumerate(episode.turns, 1):
            lines.append(f"  turn {number}: {shown_completion(str(turn.response))}")
            for call in turn.calls:  # a tool's reply: each call, its arguments, its result
                arguments = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
                failed = " (failed)" * call.failed
                lines.append(
                    f"  call: {call.name or '?'}({arguments}) -> {quoted(call.result)}{failed}"
                )
            if turn.reply is not None and not turn.calls:
                lines.append(f"  reply {number}: {quoted(turn.reply)}")
    return lines


QUESTION = 60
"""The most characters of a prompt a line shows: its end, where problems differ."""


def _questions(task: Task[Any], problems: Sequence[Any]) -> list[str]:
    """Each problem's question: what differs between their prompts, its end kept within
    QUESTION characters (the start of a long one is what problems share most)."""
    # A conversation shows as its last message: what the model answers.
    prompts = [
        prompt if isinstance(prompt, str) else str(prompt[-1].get("content", "")) if prompt else ""
        for prompt in (task.adapter.make_prompt(p) for p in problems)
    ]
    # The lines every prompt shares (a few-shot header, an instruction after the question)
    # are left out: whole lines only, to keep "Q: What is 1..." whole.
    several = len(prompts) > 1
    head = os.path.commonprefix(prompts) if several else ""  # noqa: RUF071
    head = head[: head.rfind("\n") + 1]
    rests = [p[len(head) :][::-1] for p in prompts]
    tail = os.path.commonprefix(rests)[::-1] if several else ""  # noqa: RUF071
    tail = tail[tail.find("\n") :] if "\n" in tail else ""
    questions = []
    for prompt in prompts:
        end = len(prompt) - len(tail)
        asked = prompt[len(head) : end] if len(head) < end else prompt
        question = " ".join(asked.split()) or " ".join(prompt.split())
        cut = f"...{question[-(QUESTION - 3) :]}"
        questions.append(question if len(question) <= QUESTION else cut)
    if len(set(prompts)) < len(prompts):  # problems that share a prompt: say which is which
        questions = [f"{q} [{shown(p, 60)}]" for q, p in zip(questions, problems, strict=True)]
    return questions


def _verdict(task: Task[Any], reward: float) -> str:
    correct = task.adapter.evaluate([reward]) == 1.0
    return f"{'correct' if correct else 'wrong'} (reward {reward:g})"
