"""`python -m mathrl`: turn flags and the environment into a Config, run, report.

stdout carries exactly the seed demo's lines (`Model: ...`, `Step N: ...`,
`Saved: ...`; for `sample`, one line per problem and the accuracy). Warnings
and advice go to stderr. A user's mistake exits 2 with one line; a service
that cannot be reached or refuses the key exits 1 with one line; neither
prints a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from dotenv import dotenv_values

from mathrl.backend import Backend, BackendError, Sampler, Tokenizer
from mathrl.config import DEFAULT_BASE_URL, SETTINGS, Config, ConfigError, build_config, default_of
from mathrl.loop import StepMetrics, request_seed, run_grpo_async, sample_params
from mathrl.math_task import MathAdapter, all_problems, heldout_problems, reward

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
BACKENDS = ("mint", "fake")
SAMPLE_FIELDS = (
    "seed",
    "temperature",
    "max_tokens",
    "base_model",
    "connect_timeout",
    "setup_timeout",
)
"""The settings `sample` reads; the others cannot make it fail."""
MAX_PROBLEMS = 10_000


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and a ConfigError."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see `python -m mathrl --help`)")


def _train_parser() -> _Parser:
    variables = "\n".join(
        [f"  {s.env:<22} {s.flag:<24} default {default_of(s)}" for s in SETTINGS if s.env]
        + [
            f"  {'MINT_API_KEY':<22} {'':<24} required by --backend mint",
            f"  {'MINT_BASE_URL':<22} {'':<24} default {DEFAULT_BASE_URL}",
        ]
    )
    parser = _Parser(
        prog="python -m mathrl",
        description="Train a LoRA adapter with GRPO on two-digit addition through MinT. "
        "`python -m mathrl sample --help` evaluates a saved adapter.",
        epilog="environment variables (a flag wins over its variable; `.env` is read too):\n"
        + variables,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_settings(parser, [s.field for s in SETTINGS])
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="mint",
        help="mint: the real service (needs MINT_API_KEY); fake: offline",
    )
    parser.add_argument(
        "--no-stop-at-newline",
        dest="stop_at_newline",
        action="store_false",
        help="sample up to max-tokens past the answer line (stop only at EOS)",
    )
    return parser


def _sample_parser() -> _Parser:
    parser = _Parser(
        prog="python -m mathrl sample",
        description="Sample greedy answers to held-out problems from saved weights.",
    )
    parser.add_argument("--model-path", required=True, help="the path a run printed as `Saved:`")
    parser.add_argument(
        "--problems",
        default="10",
        help=f"held-out problems to ask, 1 to {MAX_PROBLEMS} (default 10)",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="mint")
    _add_settings(parser, [f for f in SAMPLE_FIELDS if f != "temperature"])
    parser.add_argument(
        "--temperature", metavar="X", help="sampling temperature (default 0: greedy)"
    )
    parser.set_defaults(stop_at_newline=True)
    return parser


def _add_settings(parser: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    for s in SETTINGS:
        if s.field in fields:
            env = f", env {s.env}" if s.env else ""
            parser.add_argument(
                s.flag, dest=s.field, metavar="X", help=f"{s.help} (default {default_of(s)}{env})"
            )


def _environment() -> dict[str, str]:
    """os.environ, with `.env` from the working folder filling in what is unset."""
    dotenv = Path.cwd() / ".env"
    try:
        values = dotenv_values(dotenv)
    except UnicodeDecodeError as exc:
        raise ConfigError(f".env must be UTF-8 text (got byte {exc.object[exc.start]:#04x} "
                          f"at offset {exc.start} of {dotenv})") from None  # fmt: skip
    except OSError as exc:
        raise ConfigError(f".env must be a readable file (got {exc.strerror}: {dotenv})") from None
    merged = {k: v for k, v in values.items() if v is not None}
    merged.update(os.environ)
    return merged


def _config(
    args: argparse.Namespace, env: Mapping[str, str], only: Sequence[str] | None = None
) -> Config:
    flags = {s.field: getattr(args, s.field, None) for s in SETTINGS}
    return build_config(
        flags, env, only, backend=args.backend, stop_at_newline=args.stop_at_newline
    )


def _say(message: str) -> None:
    print(f"mathrl: {message}", file=sys.stderr)


def _report_step(m: StepMetrics) -> None:
    print(f"Step {m.step}: accuracy={m.accuracy:.1%}, datums={m.datums}", flush=True)
    if m.datums == 0 and m.accuracy == 1.0:
        _say(f"step {m.step}: every completion was right, so there was nothing left to learn.")
    elif m.datums == 0:
        _say(
            f"step {m.step}: all {m.groups} groups had equal rewards, so nothing was trained. "
            "Sample more varied groups: raise MINT_RL_GROUP or MINT_RL_BATCH, "
            "raise MINT_RL_TEMPERATURE, or raise MINT_RL_MAX_TOKENS."
        )


def _fake_backend(config: Config, env: Mapping[str, str]) -> Backend:
    from mathrl_fakes import FakeBackend, reference_table

    return FakeBackend(reference_table(MathAdapter(), all_problems()), seed=config.seed)


def _model_line(config: Config, tokenizer: Tokenizer) -> str:
    suffix = ", Backend: fake" if config.backend == "fake" else ""
    return f"Model: {config.base_model}, Vocab: {tokenizer.vocab_size:,}{suffix}"


def _require_key(env: Mapping[str, str]) -> None:
    if not env.get("MINT_API_KEY"):
        raise ConfigError(
            "MINT_API_KEY must be set to a MinT API key (got nothing): export it or put "
            "`MINT_API_KEY=sk-...` in .env; `--backend fake` runs offline without one"
        )


async def _train(config: Config, env: Mapping[str, str]) -> None:
    if config.backend == "fake":
        backend = _fake_backend(config, env)
    else:
        _require_key(env)
        from mathrl.mint_backend import open_backend

        backend = await open_backend(config, env)
    print(_model_line(config, backend.tokenizer), flush=True)
    result = await run_grpo_async(backend, MathAdapter(), config, _report_step)
    print(f"Saved: {result.saved_path}", flush=True)


async def _sample(config: Config, env: Mapping[str, str], model_path: str, count: int) -> None:
    tokenizer: Tokenizer
    sampler: Sampler
    if config.backend == "fake":
        fake = _fake_backend(config, env)
        tokenizer, sampler = fake.tokenizer, await fake.create_sampler(model_path)
    else:
        _require_key(env)
        from mathrl.mint_backend import open_sampler

        tokenizer, sampler = await open_sampler(config, env, model_path)
    print(_model_line(config, tokenizer), flush=True)
    adapter = MathAdapter()
    problems = heldout_problems(config.seed, count)
    prompts = [tokenizer.encode(adapter.make_prompt(p)) for p in problems]
    params = [sample_params(config, request_seed(config.seed, 0, i)) for i in range(count)]
    completions = await asyncio.gather(
        *(sampler.sample(prompt, 1, p) for prompt, p in zip(prompts, params, strict=True))
    )
    correct = 0
    for problem, (completion,) in zip(problems, completions, strict=True):
        text = tokenizer.decode(completion.tokens)
        ok = reward(text, problem.answer) == 1.0
        correct += ok
        print(
            f"{problem.a} + {problem.b} = {problem.answer}: {text!r} {'correct' if ok else 'wrong'}"
        )
    print(f"Accuracy: {correct / count:.1%} ({correct}/{count})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        env = _environment()
        if args_list[:1] == ["sample"]:
            args = _sample_parser().parse_args(args_list[1:])
            count = _problem_count(args.problems)
            # Greedy unless --temperature says otherwise: MINT_RL_TEMPERATURE is training's.
            greedy = args.temperature is None
            fields = [f for f in SAMPLE_FIELDS if not (greedy and f == "temperature")]
            config = _config(args, env, only=fields)
            if greedy:
                config = replace(config, temperature=0.0)
            asyncio.run(_sample(config, env, args.model_path, count))
        else:
            config = _config(_train_parser().parse_args(args_list), env)
            asyncio.run(_train(config, env))
    except ConfigError as exc:
        _say(f"error: {exc}")
        return EXIT_USAGE
    except BackendError as exc:
        _say(f"error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    return EXIT_OK


def _problem_count(raw: str) -> int:
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= value <= MAX_PROBLEMS:
        raise ConfigError(f"--problems must be an integer from 1 to {MAX_PROBLEMS} (got {raw!r})")
    return value
