"""The fake's model: a byte tokenizer and a tiny policy with exact logprobs.

The policy knows one thing about the task: a table from prompt text to its
target, `reference + stop[0]` then end-of-sequence (see `ReferenceTable`). It
never parses a prompt. Given a context, it finds the longest known prompt the
context starts with; the tokens after it are the completion so far.

At completion position j, while the completion so far matches the target,
three kinds of token compete: the target token, with logit
`bias_j + WIDTH * theta[min(j, POSITIONS - 1)]`; one distractor (a plausible
wrong token, chosen by a hash of the prompt and j), with logit 0; and the
255 other tokens, with logit -NOISE, which together weigh NOISE_MASS. Off the
target, or past it, every token has logit 0. Logprobs are computed in closed
form, so the ones reported at sampling time are exactly those of the
distribution the token was drawn from.

The bias makes accuracy mean something, greedy accuracy included:

- Length. An untrained policy writes the whole target at temperature 1 with
  probability about FULL_TARGET_PROB, however long the target: each of its
  L tokens starts at probability FULL_TARGET_PROB ** (1 / L). A one-line
  answer and a ten-line function are then equally learnable.
- Difficulty. Each problem has one decision position among its answer's
  tokens, and a depth in [0, DECISION_DEPTH), both chosen by a hash of the
  prompt's tokens: there the target's logit starts `depth` lower. Where that
  puts it below the distractor's 0, greedy decoding writes the distractor,
  and sampling mostly does; only training, which lifts the shared
  parameters, carries it over. So untrained greedy accuracy is well below
  100%, and it rises as theta does. The decision's logit starts from at most
  a six-token target's (DECISION_CAP): a long target's other tokens start
  higher, but its decision is as hard as a short answer's, so a task whose
  references are long (a function, a paragraph) starts as low as addition.
  An episode's later turn keeps the difficulty of its first prompt.

Why lr 1e-4 moves it visibly: a real LoRA adapter shifts a logit through
millions of parameters moving in concert. Here each `theta[k]` stands for a
block of WIDTH tied parameters whose sum is the logit. They start equal and
always receive equal gradients, so Adam, which is per-coordinate, keeps them
equal, and storing one of them with the logit at `WIDTH * theta[k]` is exact.
Adam moves each parameter by about lr per step, so a logit moves by up to
WIDTH * lr = 0.2 a step: about 4 in 20 steps, which is DECISION_DEPTH.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mathrl_fakes.tokenizer import EOS as EOS
from mathrl_fakes.tokenizer import VOCAB_SIZE as VOCAB_SIZE
from mathrl_fakes.tokenizer import ByteTokenizer as ByteTokenizer

WIDTH = 2000
POSITIONS = 8
FULL_TARGET_PROB = 0.5
DECISION_DEPTH = 4.0
NOISE_MASS = 0.05
WRONG_BIAS = 6.0
"""The logit of a named wrong answer's next token, once the policy is on it: it finishes it."""
NOISE = math.log((VOCAB_SIZE - 2) / NOISE_MASS)
"""The other tokens' logit is -NOISE, so VOCAB_SIZE - 2 of them weigh NOISE_MASS."""


def log_normaliser(logit: float) -> float:
    """log of the partition function: target `logit`, distractor 0, the rest -NOISE."""
    top = max(logit, 0.0)
    return top + math.log(math.exp(logit - top) + math.exp(-top) * (1 + NOISE_MASS))


def token_logprobs(logit: float) -> tuple[float, float, float]:
    """(log p(target), log p(distractor), log p(one other token)) at a target `logit`."""
    z = log_normaliser(logit)
    return logit - z, -z, -NOISE - z


UNIFORM_LOGPROB = -math.log(VOCAB_SIZE)


def easy_bias(length: int) -> float:
    """The logit at which `length` target tokens all come out with FULL_TARGET_PROB."""
    p = FULL_TARGET_PROB ** (1 / length)
    return math.log(p * (1 + NOISE_MASS) / (1 - p))


DECISION_CAP = easy_bias(6)
"""The most a decision position's logit starts at before its depth: a six-token target's (the
longest answer of the addition task, ` 198` with its newline and EOS). A longer target's
other positions start higher, so its whole comes out with FULL_TARGET_PROB, but its decision
is as hard as a short one's: greedy decoding writes the distractor there about as often."""


@dataclass(frozen=True, slots=True)
class Target:
    """What the policy should write after one prompt, and how hard that is."""

    tokens: tuple[int, ...]
    """`reference + stop[0]`, then EOS."""
    biases: tuple[float, ...]
    """The target's logit at each position before any training."""
    distractors: tuple[int, ...]
    """The plausible wrong token at each position."""
    alternatives: tuple[tuple[int, ...], ...] = ()
    """Wrong answers the task names (each then its stop, then EOS): where one parts from the
    target, its token is the distractor, and once on it the policy follows it to its end."""


def make_target(
    prompt: Sequence[int],
    tokens: Sequence[int],
    answer_length: int,
    alternatives: Sequence[Sequence[int]] = (),
) -> Target:
    """The target for `prompt`: its biases, its decision position and its distractors.

    Each of `alternatives` (a wrong answer's tokens) takes the distractor's
    place where it first parts from the target, unless an earlier one took
    that place; one that never parts from it is left out.
    """
    tokens = tuple(tokens)
    biases = [easy_bias(len(tokens))] * len(tokens)
    digest = hashlib.blake2b(bytes(prompt_bytes(prompt)), digest_size=64, person=b"policy").digest()
    u_where, u_depth = (w / 2.0**64 for w in struct.unpack("<2Q", digest[:16]))
    if answer_length > 0:  # as hard for a long target as for a short one: see DECISION_CAP
        decision = int(u_where * answer_length)
        biases[decision] = min(biases[decision], DECISION_CAP) - DECISION_DEPTH * u_depth
    # A shift of 1..255 bytes: never the target itself.
    shifts = [1 + int(u * 255) for u in uniforms(digest.hex(), len(tokens))]
    distractors = [(t + k) % 256 for t, k in zip(tokens, shifts, strict=True)]
    kept: list[tuple[int, ...]] = []
    claimed: set[int] = set()
    for alternative in map(tuple, alternatives):
        pairs = zip(alternative, tokens, strict=False)  # the shorter one may end first
        apart = next((i for i, (a, t) in enumerate(pairs) if a != t), None)
        if apart is None or apart in claimed:
            continue
        claimed.add(apart)
        distractors[apart] = alternative[apart]
        kept.append(alternative)
    return Target(tokens, tuple(biases), tuple(distractors), tuple(kept))


def prompt_bytes(tokens: Sequence[int]) -> list[int]:
    """A prompt's tokens as bytes, for hashing (prompts never hold EOS)."""
    return [t & 0xFF for t in tokens]


class ReferenceTable:
    """Prompt tokens -> Target, looked up by the longest matching prefix."""

    def __init__(self, targets: Mapping[tuple[int, ...], Target]) -> None:
        self._targets: dict[tuple[int, ...], Target] = {}
        self._lengths: list[int] = []
        self._earlier: dict[tuple[int, ...], int] = {}
        self.add(targets)

    def add(self, targets: Mapping[tuple[int, ...], Target], earlier: int = 0) -> None:
        """Learn more prompts' targets: later turns of an episode whose previous turn's
        prompt is their first `earlier` tokens, if `earlier`."""
        self._targets.update(targets)
        if earlier:
            self._earlier.update(dict.fromkeys(targets, earlier))
        self._lengths = sorted({len(k) for k in self._targets}, reverse=True)

    def turns(self, context: Sequence[int]) -> list[tuple[int, Target]]:
        """(prompt length, target) of each of an episode's turns in `context`, first first.

        The last is `split(context)`'s; each before it is its previous turn's prompt.
        """
        n, target = self.split(context)
        found: list[tuple[int, Target]] = []
        while target is not None:
            found.append((n, target))
            n = self._earlier.get(tuple(context[:n]), 0)
            target = self._targets.get(tuple(context[:n])) if n else None
        return found[::-1]

    def __len__(self) -> int:
        return len(self._targets)

    def split(self, context: Sequence[int]) -> tuple[int, Target | None]:
        """Return (prompt length, target) for the longest known prompt prefix.

        (0, None) when the context starts with no known prompt.
        """
        for n in self._lengths:
            if n <= len(context):
                target = self._targets.get(tuple(context[:n]))
                if target is not None:
                    return n, target
        return 0, None


@dataclass(frozen=True, slots=True)
class Position:
    """The policy's distribution at one completion position."""

    target: int | None
    """The token with the learnable logit, or None for the uniform case."""
    position: int = 0
    """Which parameter carries that logit."""
    bias: float = 0.0
    """The logit's untrained part."""
    distractor: int = 0
    learnable: bool = True
    """False on a wrong answer the task named: its logit is `bias` alone, never trained."""


UNIFORM = Position(None)


def position_at(target: Target | None, completion: Sequence[int]) -> Position:
    """The distribution after `completion`, given the prompt's target (if any)."""
    j = len(completion)
    if target is None:
        return UNIFORM
    if j < len(target.tokens) and tuple(completion) == target.tokens[:j]:
        return Position(
            target.tokens[j], min(j, POSITIONS - 1), target.biases[j], target.distractors[j]
        )
    for alternative in target.alternatives:
        if j < len(alternative) and tuple(completion) == alternative[:j]:
            token = alternative[j]
            return Position(token, 0, WRONG_BIAS, (token + 1) % 256, learnable=False)
    return UNIFORM


def logit_of(theta: Sequence[float], at: Position) -> float:
    """The target's logit at `at` (temperature 1)."""
    return at.bias + WIDTH * theta[at.position] if at.learnable else at.bias


def logprob(theta: Sequence[float], at: Position, token: int) -> float:
    """log pi_theta(token) at temperature 1."""
    if at.target is None:
        return UNIFORM_LOGPROB
    target, distractor, other = token_logprobs(logit_of(theta, at))
    return target if token == at.target else distractor if token == at.distractor else other


def uniforms(key: str, n: int) -> list[float]:
    """`n` uniforms in [0, 1) derived from `key` alone (stable across processes)."""
    out: list[float] = []
    block = 0
    while len(out) < n:
        digest = hashlib.blake2b(f"{key}#{block}".encode(), digest_size=64).digest()
        out.extend((w >> 11) * 2.0**-53 for w in struct.unpack("<8Q", digest))
        block += 1
    return out[:n]


def draw(theta: Sequence[float], at: Position, u: float, temperature: float) -> tuple[int, float]:
    """Draw one token by inverse CDF from `u`; return it with its logprob.

    The distribution is the policy's at `temperature` (every logit divided by
    it); 0 means greedy, a point mass whose logprob is 0.
    """
    if at.target is None:
        if temperature == 0:
            return 0, 0.0
        return min(int(u * VOCAB_SIZE), VOCAB_SIZE - 1), UNIFORM_LOGPROB
    logit = logit_of(theta, at)
    if temperature == 0:
        return (at.target if logit > 0 else at.distractor), 0.0
    lp_target, lp_distractor, lp_other = _tempered(logit, temperature)
    p_target, p_distractor = math.exp(lp_target), math.exp(lp_distractor)
    if u < p_target:
        return at.target, lp_target
    if u < p_target + p_distractor:
        return at.distractor, lp_distractor
    share = (u - p_target - p_distractor) / max(1 - p_target - p_distractor, 1e-300)
    k = min(int(share * (VOCAB_SIZE - 2)), VOCAB_SIZE - 3)
    low, high = sorted((at.target, at.distractor))
    token = k + (k >= low) + (k + 1 >= high)  # the k-th token that is neither of the two
    return token, lp_other


def _tempered(logit: float, temperature: float) -> tuple[float, float, float]:
    """token_logprobs with every logit (target, 0, -NOISE) divided by `temperature`."""
    a, c = logit / temperature, -NOISE / temperature
    top = max(a, 0.0, c)
    z = top + math.log(math.exp(a - top) + math.exp(-top) + (VOCAB_SIZE - 2) * math.exp(c - top))
    return a - z, -z, c - z
