"""The policy-gradient losses MinT (like Tinker) computes, one token at a time, as pure functions.

For: the fake backend, which trains with exactly these, and the mint backend,
which sends a loss's name and `loss_fn_config` for the service to compute
the same. Each token of a datum has the learner's logprob `lp` of its target
token, the sampler's logprob `q` (the datum's `logprobs`) and its advantage
`A`; with the importance ratio `r = exp(lp - q)`:

    importance_sampling   loss = -r A
    ppo                   loss = -min(r A, clip(r, low, high) A)
    cispo                 loss = -sg(clip(r, low, high)) lp A      (sg: no gradient)
    dro                   loss = -(lp A - beta (lp - q)^2 / 2)

summed over tokens and datums (the service reports the sum as `loss:sum`).
`token_loss` gives each token's loss, its gradient with respect to `lp`
(all a backend needs to train: the gradient of the weights is this times
the gradient of `lp`), and whether the clip bound it.

Not for: choosing advantages (see `mathrl.grpo`), or the KL penalty against
the base model, which shapes the advantages before any loss sees them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, TypeAlias

LossName: TypeAlias = Literal["importance_sampling", "ppo", "cispo", "dro"]
LOSSES: tuple[LossName, ...] = ("importance_sampling", "ppo", "cispo", "dro")
DEFAULT_CLIPS: dict[str, tuple[float, float]] = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0)}
"""The clip thresholds (bounds on the ratio r) the service uses unless told otherwise: PPO's
epsilon of 0.2 on both sides, and CISPO's one-sided cap."""
DEFAULT_DRO_BETA = 0.05


@dataclass(frozen=True, slots=True)
class Loss:
    """A loss and its settings: `clip_low` and `clip_high` bound the ratio (ppo, cispo);
    `beta` weighs DRO's quadratic penalty. None: the loss's default."""

    name: LossName = "importance_sampling"
    clip_low: float | None = None
    clip_high: float | None = None
    beta: float | None = None

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise ValueError(f"the loss must be one of {', '.join(LOSSES)} (got {self.name!r})")
        if not self.clips and (self.clip_low is not None or self.clip_high is not None):
            raise ValueError(
                f"clip thresholds apply to ppo and cispo only (the loss is {self.name})"
            )
        if self.name != "dro" and self.beta is not None:
            raise ValueError(f"beta applies to dro only (the loss is {self.name})")
        if self.clips and not 0 <= self.low <= 1 <= self.high:
            raise ValueError(
                "the clip thresholds must satisfy 0 <= low <= 1 <= high "
                f"(got {self.low}, {self.high})"
            )

    @property
    def low(self) -> float:
        default = DEFAULT_CLIPS.get(self.name, (0.0, math.inf))[0]
        return default if self.clip_low is None else self.clip_low

    @property
    def high(self) -> float:
        default = DEFAULT_CLIPS.get(self.name, (0.0, math.inf))[1]
        return default if self.clip_high is None else self.clip_high

    @property
    def dro_beta(self) -> float:
        return DEFAULT_DRO_BETA if self.beta is None else self.beta

    def config(self) -> dict[str, float] | None:
        """The `loss_fn_config` the service gets: every setting spelled out (None for
        importance_sampling, which has none), so the service's defaults never decide."""
        if self.clips:
            return {"clip_low_threshold": self.low, "clip_high_threshold": self.high}
        if self.name == "dro":
            return {"beta": self.dro_beta}
        return None

    @property
    def clips(self) -> bool:
        return self.name in DEFAULT_CLIPS


IMPORTANCE_SAMPLING = Loss()


def loss_named(name: str) -> LossName:
    """`name` as a LossName; ValueError if it names none of LOSSES."""
    for known in LOSSES:
        if known == name:
            return known
    raise ValueError(f"the loss must be one of {', '.join(LOSSES)} (got {name!r})")


@dataclass(frozen=True, slots=True)
class TokenLoss:
    """One token's loss, its gradient d loss / d lp, and whether the clip bound its weight."""

    loss: float
    gradient: float
    clipped: bool = False


def token_loss(loss: Loss, lp: float, q: float, advantage: float) -> TokenLoss:
    """One token's loss under `loss`, given the learner's logprob `lp` of the token, the
    sampler's `q`, and the advantage. See the module docstring for the formulas."""
    a = advantage
    if loss.name == "dro":
        beta = loss.dro_beta
        return TokenLoss(-(lp * a - beta * (lp - q) ** 2 / 2), -a + beta * (lp - q))
    r = math.exp(lp - q)
    if loss.name == "importance_sampling":
        return TokenLoss(-r * a, -r * a)  # d r / d lp = r
    c = min(max(r, loss.low), loss.high)
    if loss.name == "ppo":
        # min(r A, c A): the clipped side wins only where it is strictly lower, and there c is
        # a constant of lp, so it passes no gradient.
        if c * a < r * a:
            return TokenLoss(-c * a, 0.0, clipped=True)
        return TokenLoss(-r * a, -r * a)
    return TokenLoss(-c * lp * a, -c * a, clipped=c != r)  # cispo: the weight c is detached
