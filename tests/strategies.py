"""Hypothesis strategies for mathrl's pure core, in one place."""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from hypothesis import assume
from hypothesis import strategies as st

from mathrl.backend import Datum, SampleParams
from mathrl.cli.settings import SETTINGS
from mathrl.config import MAX_SEED, TrainConfig
from mathrl.grpo import episode_datum
from mathrl.losses import LOSSES, Loss, LossName, Parameter
from mathrl.tasks.addition import OPERAND_MAX, AdditionProblem
from mathrl.tasks.code.sandbox import STATUSES, Outcome
from mathrl.tasks.code.task import ALL as ALL_CODE_PROBLEMS
from mathrl.tasks.dataset.rows import Keyed
from mathrl.tasks.math.answers import MAX_ANSWER_CHARS

operands = st.integers(min_value=0, max_value=OPERAND_MAX)
"""An operand of the addition task."""

problems = st.builds(AdditionProblem, operands, operands)
"""Any problem the task can generate."""

seeds = st.integers(min_value=-(2**63), max_value=2**63 - 1)
"""A run seed; negative and huge seeds are legal."""

steps = st.integers(min_value=0, max_value=10_000)
"""A step number."""

any_text = st.text()
"""Arbitrary Unicode, for functions that must never raise."""

integers_in_text = st.integers(min_value=-(10**30), max_value=10**30)
"""An integer to write into text."""

integer_free_text = st.text(
    st.characters(blacklist_categories=["Nd"], blacklist_characters="-"), max_size=20
)
"""Text with no digit (of any script) and no minus sign, to surround an integer."""

rewards = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
"""A finite reward of plausible magnitude (differences cannot overflow)."""

any_finite_rewards = st.lists(
    st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=8
)
"""A group of any finite floats, including ones near the largest float."""

reward_groups = st.lists(rewards, min_size=1, max_size=32)
"""The rewards of one group."""

binary_reward_groups = st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=16)
"""The rewards of one group under an exact-match verifier."""

tokens = st.integers(min_value=0, max_value=151_935)
"""A token id of a Qwen-sized vocabulary."""

prompts_T = st.lists(tokens, min_size=1, max_size=40)
"""A non-empty prompt."""


@st.composite
def completions(draw: st.DrawFn) -> tuple[list[int], list[float]]:
    """A completion (possibly empty) with one sampler logprob per token (>= -1e4)."""
    tokens_T = draw(st.lists(tokens, max_size=16))
    logprobs_T = draw(
        st.lists(
            st.floats(min_value=-1e4, max_value=0.0),
            min_size=len(tokens_T),
            max_size=len(tokens_T),
        )
    )
    return tokens_T, logprobs_T


@st.composite
def episodes(draw: st.DrawFn) -> tuple[list[list[int]], list[list[float]], list[list[int]]]:
    """An episode's K model turns (each possibly empty, with logprobs) and K - 1 replies."""
    turns = draw(st.lists(completions(), min_size=1, max_size=4))
    replies = draw(
        st.lists(st.lists(tokens, max_size=6), min_size=len(turns) - 1, max_size=len(turns) - 1)
    )
    return [t for t, _ in turns], [lp for _, lp in turns], replies


@st.composite
def episode_datums(draw: st.DrawFn, advantage: st.SearchStrategy[float] = rewards) -> Datum:
    """The datum of a prompt and an episode (`episodes`) at an advantage; never None (an
    episode whose turns are all empty has no datum)."""
    episode = draw(episodes())
    datum = episode_datum(draw(prompts_T), *episode, draw(advantage))
    assume(datum is not None)
    assert datum is not None
    return datum


unicode_text = st.text(st.characters(codec=None, categories=None))
"""Any string at all, lone surrogates included (the fake tokenizer round-trips them)."""


counts = st.integers(min_value=1, max_value=1000)
"""A valid value for a count setting such as steps or batch."""

raw_setting_values = st.text(max_size=8)
"""Whatever a user might type as a setting's value."""

setting_indices = st.integers(min_value=0, max_value=len(SETTINGS) - 1)
"""An index into mathrl.config.SETTINGS."""

policy_thetas = st.floats(-0.01, 0.01)
"""A fake-policy parameter: WIDTH * theta spans logits from -20 to +20."""

fake_token_ids = st.integers(min_value=0, max_value=256)
"""A token id of the fake's vocabulary (256 is EOS)."""

biases = st.floats(-8.0, 8.0)
"""The untrained part of a fake-policy logit."""

temperatures = st.sampled_from([0.25, 0.5, 1.0, 2.0])
"""A positive sampling temperature."""

sampling_temperatures = st.sampled_from([0.0, 0.5, 1.0, 2.0])
"""A sampling temperature, greedy (0) included."""


@st.composite
def small_configs(draw: st.DrawFn) -> TrainConfig:
    """A two-step run small enough to run many times in a property test."""
    return TrainConfig(
        steps=2,
        seed=draw(st.integers(0, MAX_SEED)),
        batch=draw(st.integers(1, 6)),
        group=draw(st.integers(2, 5)),
        max_tokens=draw(st.integers(1, 6)),
        temperature=draw(sampling_temperatures),
    )


configs = st.builds(
    TrainConfig,
    steps=st.integers(1, 100),
    batch=st.integers(1, 64),
    group=st.integers(2, 16),
    lr=st.floats(1e-6, 1e-2),
    max_tokens=st.one_of(st.none(), st.integers(1, 32)),
    temperature=st.floats(0.0, 2.0),
    seed=st.integers(0, MAX_SEED),
    max_steps_off_policy=st.integers(0, 1),
    eval_every=st.integers(0, 10),
    eval_problems=st.integers(1, 200),
    save_every=st.integers(1, 10),
)
"""Any valid training configuration."""

stop_strings = st.lists(st.text(min_size=1, max_size=3), max_size=4).map(tuple)
"""Stop strings as SampleParams holds them."""

turn_stops = st.none() | stop_strings
"""The stops a feedback may set for the next turn (`Feedback.stop`); None: the task's."""

turn_budgets = st.none() | st.integers(min_value=1, max_value=4096)
"""The budget a feedback may set for the next turn (`Feedback.max_tokens`); None: the run's."""

bad_turn_stops = st.one_of(
    st.text(max_size=3),  # one string, not a tuple of them
    stop_strings.map(lambda stops: (*stops, "")),
    st.lists(st.integers() | st.none(), min_size=1, max_size=3).map(tuple),
    st.integers(),
)
"""What `Feedback.stop` must not be."""

bad_turn_budgets = st.one_of(st.integers(max_value=0), st.booleans(), st.floats(), st.text())
"""What `Feedback.max_tokens` must not be."""

sample_params = st.builds(
    SampleParams,
    max_tokens=st.integers(min_value=1, max_value=4096),
    temperature=st.sampled_from([0.0, 0.5, 1.0]),
    stop=stop_strings,
    seed=st.none() | st.integers(min_value=0, max_value=2**31 - 1),
    end_of_turn=st.booleans(),
)
"""Any valid sampling parameters."""

fault_rates = st.sampled_from([0.1, 0.2, 0.3])
"""A share of fake calls that fail transiently."""

endings = st.sampled_from(["stop", "end_of_turn", "end_of_sequence", "length"])
"""How sampling may end a completion."""

part_names = st.text(
    st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")), min_size=1, max_size=8
)
"""The name of a reward part. (A range of code points, not `codec="ascii"`: hypothesis would
work out which characters that codec encodes, 1 s in each worker, 3 s under coverage.)"""

reward_parts = st.dictionaries(part_names, rewards, min_size=1, max_size=4)
"""A reward given as named finite parts."""

metric_values = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**6), 10**6)
"""A value a task may give a metric: any finite float, the largest among them, or an int."""

completion_metrics = st.lists(
    st.dictionaries(st.sampled_from(["tokens", "kept", "solved_on_turn"]), metric_values),
    max_size=12,
)
"""The metrics of a step's completions: each reports some of three names, or none."""

messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=30)}
    ),
    min_size=1,
    max_size=4,
)
"""A conversation: one to four turns of any text."""


logprobs = st.floats(min_value=-12.0, max_value=0.0)
"""A token's logprob under a policy: from nearly impossible to certain."""

advantages = st.floats(min_value=-10.0, max_value=10.0, allow_subnormal=False)
"""A token's advantage; never subnormal (at 5e-324, r * A underflows to 0 and no side clips)."""

clip_pairs = st.tuples(st.floats(0.0, 1.0), st.floats(1.0, 10.0))
"""(clip_low, clip_high) thresholds of the ratio."""


def setting_values(parameter: Parameter) -> st.SearchStrategy[float | None]:
    """A value of a loss setting: any in its range, either end, or None (the loss's default)."""
    return (
        st.none()
        | st.sampled_from([parameter.low, parameter.high])
        | st.floats(parameter.low, parameter.high)
    )


def given_settings(name: LossName) -> st.SearchStrategy[dict[str, float | None]]:
    """Valid settings, by field, for the loss `name` of `mathrl.losses.LOSSES`."""
    return st.fixed_dictionaries({p.field: setting_values(p) for p in LOSSES[name].defaults})


loss_names = st.sampled_from(list(LOSSES))
"""The name of a loss in the table."""

losses = loss_names.flatmap(lambda name: given_settings(name).map(lambda s: Loss(name, **s)))
"""Any loss of `mathrl.losses`, with any valid settings (some left to their defaults)."""

kl_coefs = st.just(0.0) | st.floats(1e-3, 10.0)
"""A KL coefficient: 0 (no penalty), or a positive one up to the config's limit."""


@st.composite
def minibatch_results(draw: st.DrawFn) -> list[tuple[float, float, int]]:
    """A step's minibatches, one to six: each one's loss, clip fraction (a share of its model
    tokens) and model tokens (at least one, as every datum has)."""
    return draw(
        st.lists(
            st.tuples(st.floats(-1e3, 1e3), st.floats(0.0, 1.0), st.integers(1, 500)),
            min_size=1,
            max_size=6,
        )
    )


@st.composite
def logistic_tables(draw: st.DrawFn, positions: int, vocab: int) -> list[list[float]]:
    """A small learnable policy: a row of `vocab` logits (from -4 to 4) per position of a
    datum, each row its own parameters, so a row used only by the prompt is a parameter only
    the prompt's positions touch."""
    row = st.lists(st.floats(-4.0, 4.0), min_size=vocab, max_size=vocab)
    return draw(st.lists(row, min_size=positions, max_size=positions))


words = st.lists(st.text(st.characters(categories=["L"]), min_size=1, max_size=8), min_size=1)
"""A list of at least one non-empty word, as a message lists names."""

scales = st.sampled_from(["none", "group", "batch"])
"""How advantages are scaled."""


# -- the math task (mathrl.tasks.math) ----------------------------------------------------

plain_values = st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=64)
"""The value of a plain number a final answer may hold: at most 12 significant digits in its
spellings, where math-verify's fifteen-digit floats are exact enough to compare."""


@st.composite
def spellings(draw: st.DrawFn, value: Fraction) -> str:
    """`value` as a final answer may write it: integer (commas or not), decimal (when it ends),
    a/b, \\frac{a}{b} or \\dfrac{a}{b}, with $...$ or \\$ around it now and then."""
    forms = [f"{value.numerator}/{value.denominator}", _frac(value, "frac"), _frac(value, "dfrac")]
    if value.denominator == 1:
        n = value.numerator
        forms += [str(n), f"{n:,}", f"{n}.0"]
    elif 10**6 % value.denominator == 0:  # a finite decimal of at most six places
        forms.append(f"{float(value):.6f}".rstrip("0"))
    text = draw(st.sampled_from(forms))
    wrap = draw(st.sampled_from(["{}", "${}$", "\\${}", "{} "]))
    return wrap.format(text)


GROUP_SEPARATORS = (",", "{,}", "\\,", " ", ",\\!", "\\ ", "~", "\\;", "")
"""What may group a number's digits in threes, for the math task's grader (or nothing)."""

grouped_values = st.decimals(
    min_value=-(10**12), max_value=10**12, places=2, allow_nan=False, allow_infinity=False
)
"""A number an answer may write with its digits grouped: up to thirteen digits, two places
(math-verify rounds decimals to six: different values stay different)."""


@st.composite
def grouped(draw: st.DrawFn, value: Decimal) -> str:
    """`value` as a final answer may write it with its digits grouped by one of
    GROUP_SEPARATORS: bare, as `x = ...`, with a unit or a currency sign. (Not in a
    bracket, where commas separate a list's items: `(3,100)`.)"""
    whole, _, places = f"{abs(value):f}".partition(".")
    digits = f"{int(whole):,}".replace(",", draw(st.sampled_from(GROUP_SEPARATORS)))
    places = places.rstrip("0")
    number = ("-" if value < 0 else "") + digits + (f".{places}" if places else "")
    return draw(st.sampled_from(["{}", "x = {}", "{}\\text{{ cm}}", "\\${}"])).format(number)


def _frac(value: Fraction, command: str) -> str:
    sign = "-" if value < 0 else ""
    return f"{sign}\\{command}{{{abs(value.numerator)}}}{{{value.denominator}}}"


LATEX_PIECES = (
    "\\frac", "\\sqrt", "\\pi", "\\boxed", "\\{", "\\}", "{", "}", "^", "_", "(", ")", "[",
    "]", ",", "x", "2", "9", "0.5", "-", "+", "\\cdot", "\\infty", "\\text{ cm}", "%", "$",
    "####", " ", "\n", "=", "\\left(", "\\right)", "\\le", "/",
)  # fmt: skip
latex_texts = st.lists(st.sampled_from(LATEX_PIECES), max_size=24).map("".join)
"""Text made of LaTeX's pieces, balanced or not: what a grader or an answer finder may meet."""

answer_texts = st.one_of(
    latex_texts, st.text(max_size=40), st.text(st.characters(codec=None), max_size=40)
)
"""Any final answer or completion a grader may be given, LaTeX-like or not."""

huge_answers = st.one_of(
    st.integers(MAX_ANSWER_CHARS + 1, 100_000).map(lambda n: "1" * n),
    st.text(min_size=MAX_ANSWER_CHARS + 1, max_size=2_000),
    st.lists(st.sampled_from(LATEX_PIECES), min_size=MAX_ANSWER_CHARS + 1, max_size=600).map(
        "".join
    ),
)
"""An answer longer than any a grader is shown: up to 100,000 digits (int() reads at most
4,300), or text, or LaTeX's pieces."""

problem_counts = st.integers(min_value=1, max_value=60)
"""How many training problems a math-task source holds."""

batch_sizes = st.integers(min_value=1, max_value=25)
"""Problems a training step draws."""


@st.composite
def sample_counts(draw: st.DrawFn, max_n: int = 300) -> tuple[int, int, int]:
    """(n, c, k): n samples of one problem, c of them correct, and a k from 1 to n."""
    n = draw(st.integers(1, max_n))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@st.composite
def voted_samples(draw: st.DrawFn, max_n: int = 8) -> tuple[list[str | None], list[bool]]:
    """One problem's samples: the answer each names (None: none; from three, so they repeat
    and tie) and whether each is correct (drawn apart from the answer: a format reward can
    fail one sample and pass another that names the same answer)."""
    answers = draw(st.lists(st.sampled_from([None, "7", "5", "-3"]), min_size=1, max_size=max_n))
    return answers, draw(st.lists(st.booleans(), min_size=len(answers), max_size=len(answers)))


tagless_text = st.text(st.characters(blacklist_characters="<>"), max_size=40)
"""Text that cannot hold an `<answer>` tag, to surround one (the reasoning-gym task)."""

tagged_text = st.lists(
    st.sampled_from(["<answer>", "</answer>", "<", "answer>", " 42 ", "\n"]) | tagless_text,
    max_size=12,
).map("".join)
"""Text with answer tags in any order, nested, unclosed or cut in half."""

outcomes = st.floats(0.0, 1.0) | st.sampled_from([0.0, 0.5, 1.0]) | st.booleans()
"""What a pairwise judge may say of a against b: a number in [0, 1], or True/False."""


@st.composite
def judged_items(
    draw: st.DrawFn, antisymmetric: bool = False
) -> tuple[list[int], dict[tuple[int, int], float]]:
    """Items (from a pool of four, so they repeat) and a judge's table: `table[a, b]` is a's
    outcome against b. Any table (position bias, a judge that beats itself), or with
    `antisymmetric` one where b's outcome against a is 1 - a's, and a ties itself."""
    items = draw(st.lists(st.integers(0, 3), max_size=8))
    table: dict[tuple[int, int], float] = {}
    for a in range(4):
        for b in range(4):
            if not antisymmetric:
                table[a, b] = draw(outcomes)
            elif a == b:
                table[a, b] = 0.5
            elif a < b:
                table[a, b] = draw(outcomes)
                table[b, a] = 1 - table[a, b]
    return items, table


problem_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
"""The values a problem is built from, each its `repr` in `mathrl.problem_keys`."""

problem_values = st.recursive(
    problem_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.frozensets(st.text(max_size=4), max_size=4),
    ),
    max_leaves=12,
)
"""A problem as a task may build it: nested lists, tuples, dicts and sets of plain values."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=64),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
"""What a sandboxed function may return (JSON: NaN and infinities too)."""

sandbox_outcomes = st.builds(
    Outcome,
    st.sampled_from(STATUSES),
    st.lists(json_values, max_size=8).map(tuple),
    st.text(max_size=300),
)
"""Any outcome of a sandbox call."""

code_problems = st.sampled_from(ALL_CODE_PROBLEMS)

cache_puts = st.lists(
    st.tuples(st.text(max_size=40), code_problems, st.booleans(), sandbox_outcomes),
    max_size=40,
)
"""(code, problem, policy, outcome) to put in a reward cache, in order; codes repeat."""

absolute_paths = st.lists(st.sampled_from([b"tmp", b"tmpx", b"usr", b"a", b".."]), max_size=4).map(
    lambda parts: b"/" + b"/".join(parts)
)
"""Absolute paths of a few names, some of which begin another's ("tmp", "tmpx")."""


row_values = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=3),
)
"""What a field of a data file's row may hold: text, a number, a switch, a list, null."""

data_rows = st.dictionaries(st.sampled_from(["value", "answer", "other"]), row_values, max_size=3)
"""A row as a source reads it: some of the fields a task asks for, any of them missing or odd."""

data_rows_lists = st.lists(data_rows, max_size=12)
"""A source's rows."""

booleans = st.booleans()
"""A switch (the `skip_bad_rows` option, say)."""


@st.composite
def keyed_problems(draw: st.DrawFn) -> list[Keyed[str]]:
    """At least two distinct problems, as the rows module keeps them (by prompt)."""
    keys = draw(st.lists(st.text(max_size=6), min_size=2, max_size=30, unique=True))
    return [Keyed(k, k, None, f"line {n}") for n, k in enumerate(keys, 1)]


held_out_shares = st.floats(min_value=0.01, max_value=0.5) | st.sampled_from([0.1, 0.25, 0.5])
"""A share of a source's rows to hold out (the data tasks' `heldout`)."""
progress_rooms = st.integers(min_value=1, max_value=300)
"""The columns the progress rows may fill: a terminal's width less one."""


@st.composite
def progress_texts(
    draw: st.DrawFn,
) -> tuple[int, int, tuple[int, int], int, tuple[int, int]]:
    """The widths of what the progress rows say (`mathrl.cli.progress.row_widths`): the
    heading, the counts, the clock (elapsed, estimate), the phase, and the last step's line
    with its reward and without (no longer)."""
    short = draw(st.integers(0, 60))
    return (
        draw(st.integers(10, 16)),
        draw(st.integers(3, 13)),
        (draw(st.integers(7, 9)), draw(st.integers(11, 13))),
        draw(st.integers(8, 80)),
        (short + draw(st.integers(0, 20)), short),
    )


# -- tools (`mathrl.tools`) ------------------------------------------------------------

_SCALAR_HINTS = st.sampled_from([str, int, float, bool])
_LITERALS = st.one_of(
    st.lists(st.text("abcxyz", min_size=1, max_size=4), min_size=1, max_size=3, unique=True),
    st.lists(st.integers(-5, 5), min_size=1, max_size=3, unique=True),
).map(lambda values: Literal[tuple(values)])
tool_hints = st.recursive(
    _SCALAR_HINTS | _LITERALS | st.sampled_from([list, dict]),
    lambda inner: st.one_of(
        inner.map(lambda hint: list[hint]),  # type: ignore[valid-type]
        inner.map(lambda hint: dict[str, hint]),  # type: ignore[valid-type]
        inner.map(lambda hint: hint | None),
        st.tuples(_SCALAR_HINTS, _SCALAR_HINTS).map(lambda pair: pair[0] | pair[1]),
    ),
    max_leaves=4,
)
"""A parameter's type a tool may declare: scalars, Literal, list[...], dict[str, ...], unions."""

_WORDS = ("the", "a", "number", "of", "value", "to", "use", "add", "list", "text")
_words = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(" ".join)
tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
"""A tool's (or a parameter's) name: a plain identifier."""


@st.composite
def tool_functions(draw: st.DrawFn) -> Callable[..., Any]:
    """A function as a tool is written: parameters with type hints (some with defaults), a
    description, and an `Args:` line each, one line or two; sometimes a `Returns:` too."""
    names = draw(st.lists(tool_names.filter(lambda n: not keyword.iskeyword(n)), max_size=5,
                          unique=True))  # fmt: skip
    hints = {name: draw(tool_hints) for name in names}
    defaults = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    params, seen_default = [], False
    for name, default in zip(names, defaults, strict=True):
        seen_default = seen_default or default  # no required parameter after one with a default
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=hints[name],
                **({"default": None} if seen_default else {}),
            )
        )
    lines = [draw(_words).capitalize() + ".", ""]
    if draw(st.booleans()):
        lines += [draw(_words) + ".", ""]
    if names:
        lines.append("Args:")
        for name in names:
            lines.append(f"    {name}: {draw(_words)}")
            if draw(st.booleans()):
                lines.append(f"        {draw(_words)}.")
    if draw(st.booleans()):
        lines += ["", "Returns:", f"    {draw(_words)}"]

    def function(**arguments: Any) -> Any:
        return arguments

    function.__name__ = draw(tool_names)
    function.__doc__ = "\n".join(lines)
    function.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    function.__annotations__ = dict(hints)
    return function


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
"""A JSON value, as a model may give it as an argument."""
written_calls = st.lists(
    st.tuples(tool_names, st.dictionaries(st.text(max_size=6), json_values, max_size=3)),
    min_size=1, max_size=4,
)  # fmt: skip
"""Calls a turn may write: (tool name, arguments) each."""
