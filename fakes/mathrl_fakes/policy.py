"""The fake's model: a char tokenizer and a tiny policy with exact logprobs.

The policy knows one thing about the task: a table from prompt text to the
adapter's reference completion. It never parses a prompt. Given a context,
it finds the longest known prompt the context starts with; the tokens after
it are the completion so far.

At completion position j, while the completion so far matches the target
`reference + "\\n" + EOS`, the target token has logit `WIDTH * theta[j]` and
every other token logit 0. Off target, or past it, every token has logit 0.
Unknown prompts get the uniform distribution. Logprobs are computed in
closed form, so the ones reported at sampling time are exactly those of the
distribution the token was drawn from.

Why lr 1e-4 moves it visibly: a real LoRA adapter shifts a logit through
millions of parameters moving in concert. Here each `theta[j]` stands for a
block of WIDTH tied parameters whose sum is the logit. They start equal and
always receive equal gradients, so Adam, which is per-coordinate, keeps them
equal, and storing one of them with the logit at `WIDTH * theta[j]` is
exact. Adam moves each parameter by about lr per step, so the logit moves by
up to WIDTH * lr = 0.1 per step: about 20 steps take the per-token
probability of the target from 0.8 to above 0.95.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EOS = 128
VOCAB_SIZE = 129
WIDTH = 1000
POSITIONS = 8
INITIAL_TARGET_PROB = 0.8
"""Per-token probability of the target before any training (temperature 1)."""


class CharTokenizer:
    """Token i is the ASCII character chr(i); token 128 is end-of-sequence.

    `decode(encode(s)) == s` for every ASCII string. EOS decodes to "".
    """

    @property
    def eos_token_id(self) -> int:
        return EOS

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        tokens = [ord(c) for c in text]
        for i, t in enumerate(tokens):
            if t >= EOS:
                raise ValueError(
                    f"the fake tokenizer encodes ASCII only (got {text[i]!r} at index {i})"
                )
        return tokens

    def decode(self, tokens: Sequence[int]) -> str:
        for t in tokens:
            if not 0 <= t < VOCAB_SIZE:
                raise ValueError(f"token ids must be in 0..{VOCAB_SIZE - 1} (got {t})")
        return "".join(chr(t) for t in tokens if t != EOS)


def initial_theta() -> list[float]:
    """Parameters at which every target token has probability INITIAL_TARGET_PROB."""
    p = INITIAL_TARGET_PROB
    logit = math.log(p * (VOCAB_SIZE - 1) / (1 - p))
    return [logit / WIDTH] * POSITIONS


def target_logprob(logit: float) -> float:
    """log p(target) when the target has `logit` and VOCAB_SIZE - 1 others have 0."""
    # -log(1 + (V-1) e^-x), stable for large positive or negative x.
    if logit >= 0:
        return -math.log1p((VOCAB_SIZE - 1) * math.exp(-logit))
    return logit - math.log(math.exp(logit) + VOCAB_SIZE - 1)


def other_logprob(logit: float) -> float:
    """log p(one given non-target token) in the same distribution."""
    return target_logprob(logit) - logit


UNIFORM_LOGPROB = -math.log(VOCAB_SIZE)


class ReferenceTable:
    """Prompt tokens -> target tokens, looked up by the longest matching prefix."""

    def __init__(self, references: Mapping[str, str], tokenizer: CharTokenizer) -> None:
        self._targets: dict[tuple[int, ...], tuple[int, ...]] = {}
        for prompt, reference in references.items():
            key = tuple(tokenizer.encode(prompt))
            self._targets[key] = (*tokenizer.encode(reference + "\n"), EOS)
        self._lengths = sorted({len(k) for k in self._targets}, reverse=True)

    def split(self, context: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
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
class Step:
    """The policy's distribution at one completion position."""

    target: int | None
    """The token with the learnable logit, or None for the uniform case."""
    position: int
    """Which parameter carries that logit."""


def step_at(target: tuple[int, ...] | None, completion: Sequence[int]) -> Step:
    """The distribution after `completion`, given the prompt's target (if any)."""
    j = len(completion)
    if target is None or j >= len(target) or tuple(completion) != target[:j]:
        return Step(None, 0)
    return Step(target[j], min(j, POSITIONS - 1))


def logprob(theta: Sequence[float], step: Step, token: int) -> float:
    """log pi_theta(token) at temperature 1."""
    if step.target is None:
        return UNIFORM_LOGPROB
    logit = WIDTH * theta[step.position]
    return target_logprob(logit) if token == step.target else other_logprob(logit)


def uniforms(key: str, n: int) -> list[float]:
    """`n` uniforms in [0, 1) derived from `key` alone (stable across processes)."""
    out: list[float] = []
    block = 0
    while len(out) < n:
        digest = hashlib.blake2b(f"{key}#{block}".encode(), digest_size=64).digest()
        out.extend((w >> 11) * 2.0**-53 for w in struct.unpack("<8Q", digest))
        block += 1
    return out[:n]


def draw(theta: Sequence[float], step: Step, u: float, temperature: float) -> tuple[int, float]:
    """Draw one token by inverse CDF from `u`; return it with its logprob.

    The distribution is the policy's at `temperature`; 0 means greedy, a point
    mass whose logprob is 0.
    """
    if step.target is None:
        if temperature == 0:
            return 0, 0.0
        return min(int(u * VOCAB_SIZE), VOCAB_SIZE - 1), UNIFORM_LOGPROB
    logit = WIDTH * theta[step.position]
    if temperature == 0:
        return (step.target if logit > 0 else int(step.target == 0)), 0.0
    scaled = logit / temperature
    lp_target = target_logprob(scaled)
    p_target = math.exp(lp_target)
    if u < p_target:
        return step.target, lp_target
    k = min(int((u - p_target) / (1 - p_target) * (VOCAB_SIZE - 1)), VOCAB_SIZE - 2)
    token = k if k < step.target else k + 1  # the k-th token other than the target
    return token, other_logprob(scaled)
