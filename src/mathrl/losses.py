"""The policy-gradient losses: one table, `LOSSES`, of each loss, its settings and its formula.

For: every part of mathrl that needs a fact about a loss. The config checks
the settings against the table, the command line words their help and
defaults from it, the fake backend trains with its token functions, the mint
backend sends a loss's name and `loss_fn_config` for the service to compute
the same, and the checkpoint names fingerprint that config. Not for:
choosing advantages (`mathrl.grpo`), or the KL penalty against the base
model, which shapes the advantages before any loss sees them.

Each token of a datum has the learner's logprob `lp` of its target token,
the sampler's logprob `q` (the datum's `logprobs`) and its advantage `A`.
With the importance ratio `r = exp(lp - q)`, a loss is, per token:

    loss                 per token                                  settings (default)
    importance_sampling  -r A                                       -
    ppo                  -min(r A, clip(r, clip_low, clip_high) A)  clip_low 0.8, clip_high 1.2
    cispo                -sg(clip(r, clip_low, clip_high)) lp A     clip_low 0, clip_high 4
    dro                  -(lp A - dro_beta (lp - q)^2 / 2)          dro_beta 0.05

summed over tokens and datums (the service reports the sum as `loss:sum`).
`sg`: no gradient passes through it; where PPO's clipped side is the
minimum, it passes none either. At r = 1 every loss has the gradient -A.
The settings, each set by the `TrainConfig` field of its name:

    setting    loss_fn_config key   range     meaning
    clip_low   clip_low_threshold   0 to 1    the lower bound of the importance ratio
    clip_high  clip_high_threshold  1 to 100  the upper bound of the importance ratio
    dro_beta   beta                 0 to 100  the weight of its quadratic penalty

(A test prints both tables from `LOSSES` and compares.) A setting left
unset (None) is the loss's default; one the loss does not take is refused.
Every setting is sent spelled out in `loss_fn_config`, defaults included,
so the service's own defaults never decide, and a setting given at its
default trains (and names its checkpoints) as one left unset. A loss that
clips (`LossSpec.clips`) has backends report the share of the model's tokens
(True in the datums' masks, `mathrl.backend.Datum`) whose ratio it clipped as
`clipped:frac`; over a step's minibatches, the share of all their model
tokens (`mathrl.step.combined`).

The service sums a loss over every position of a datum; it is told nothing
of the mask. Off the mask (the prompt's and the environment's tokens) a
datum carries A = 0, where importance_sampling, ppo and cispo are exactly 0.
DRO's penalty is not (`LossSpec.every_position`): with the q = 0 a datum is
built with there, it would pull those tokens' logprobs towards 0 with weight
dro_beta, fine-tuning on the prompt. So before a step trains with it, q off
the mask becomes the trained policy's own logprob (`mathrl.grpo.anchored`,
one more round trip of `Sampler.logprobs`, the same one as the KL penalty's
when both are on): there lp - q is about 0, and so are the penalty and its
gradient. About, on a service: the sampler's numerics are not the learner's,
and with substeps a later minibatch meets weights the earlier ones moved, so
what is left there is a gradient of dro_beta (lp - q), which pulls those
tokens back towards the step's starting weights by as much as the earlier
minibatches moved them. Exactly 0 on the fake. MinT's `weights`
input would not do it: that is cross_entropy's, and DRO takes none. On the
fake at the addition task's defaults (`--loss dro`, 5 steps), DRO's
`loss:sum` a step is -140 to -230 anchored, as cispo's (-160 to -215, the
same lp A form), and +690 to +880 with q left at 0 (the prompt's penalty);
importance_sampling's and ppo's are +10 to +30.

At a sampling temperature other than 1, the sampler's q is the tempered
distribution's and the learner's lp is at temperature 1, so r is not 1 even
on-policy, and a loss that clips clips tokens the policy itself just
sampled. A run reports it once, with how much its first step clipped
(`mathrl.report.TemperedRatio`); the command line says it on stderr.

`token_loss` gives one token's loss, its gradient with respect to `lp` (all
a backend needs to train: the gradient of the weights is this times the
gradient of `lp`), and whether the clip bound it.

Adding a loss: its name in `LossName`, its entry in `LOSSES` and its token
function, here, and nothing else, as long as its settings are kinds listed
above. A new kind of setting is a `Parameter` here and also a `TrainConfig`
field of the same name (None by default), since that dataclass is typed;
the command line derives its flag and variable from the field's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from mathrl.text import listed

LossName: TypeAlias = Literal["importance_sampling", "ppo", "cispo", "dro"]
"""The names of `LOSSES`, for the type checker: the same names, in the same order."""
DEFAULT_LOSS: LossName = "importance_sampling"


@dataclass(frozen=True, slots=True)
class TokenLoss:
    """One token's loss, its gradient d loss / d lp, and whether the clip bound its weight."""

    loss: float
    gradient: float
    clipped: bool = False


@dataclass(frozen=True, slots=True)
class Parameter:
    """One kind of loss setting: the `TrainConfig` field that sets it (its name here too),
    the key of `loss_fn_config` that carries it, its range, and what it means."""

    field: str
    key: str
    low: float
    high: float
    meaning: str

    def allows(self, value: float) -> bool:
        """True for a finite number in the range, both ends included."""
        return math.isfinite(value) and self.low <= value <= self.high


CLIP_LOW = Parameter(
    "clip_low", "clip_low_threshold", 0.0, 1.0, "the lower bound of the importance ratio"
)
CLIP_HIGH = Parameter(
    "clip_high", "clip_high_threshold", 1.0, 100.0, "the upper bound of the importance ratio"
)
DRO_BETA = Parameter("dro_beta", "beta", 0.0, 100.0, "the weight of its quadratic penalty")


@dataclass(frozen=True, slots=True)
class LossSpec:
    """One loss: its token function, its formula as the docstring prints it, its settings
    with their defaults, and what backends treat differently about it."""

    token: Callable[..., TokenLoss]
    """(lp, q, A, **settings by field name) -> TokenLoss."""
    formula: str
    defaults: Mapping[Parameter, float] = field(default_factory=dict)
    clips: bool = False
    """Its token function can report a token clipped: backends report `clipped:frac`."""
    every_position: bool = False
    """It is not 0 where A = 0, so it acts off the mask too: the step anchors q there at the
    policy's own logprob (`mathrl.grpo.anchored`)."""


def _importance_sampling(lp: float, q: float, a: float) -> TokenLoss:
    r = math.exp(lp - q)
    return TokenLoss(-r * a, -r * a)  # d r / d lp = r


def _ppo(lp: float, q: float, a: float, *, clip_low: float, clip_high: float) -> TokenLoss:
    r = math.exp(lp - q)
    c = min(max(r, clip_low), clip_high)
    # min(r A, c A): the clipped side wins only where it is strictly lower, and there c is a
    # constant of lp, so it passes no gradient.
    if c * a < r * a:
        return TokenLoss(-c * a, 0.0, clipped=True)
    return TokenLoss(-r * a, -r * a)


def _cispo(lp: float, q: float, a: float, *, clip_low: float, clip_high: float) -> TokenLoss:
    r = math.exp(lp - q)
    c = min(max(r, clip_low), clip_high)
    return TokenLoss(-c * lp * a, -c * a, clipped=c != r)  # the weight c is detached


def _dro(lp: float, q: float, a: float, *, dro_beta: float) -> TokenLoss:
    return TokenLoss(-(lp * a - dro_beta * (lp - q) ** 2 / 2), -a + dro_beta * (lp - q))


LOSSES: dict[LossName, LossSpec] = {
    "importance_sampling": LossSpec(_importance_sampling, "-r A"),
    "ppo": LossSpec(
        _ppo,
        "-min(r A, clip(r, clip_low, clip_high) A)",
        {CLIP_LOW: 0.8, CLIP_HIGH: 1.2},  # PPO's epsilon of 0.2, on both sides
        clips=True,
    ),
    "cispo": LossSpec(
        _cispo,
        "-sg(clip(r, clip_low, clip_high)) lp A",
        {CLIP_LOW: 0.0, CLIP_HIGH: 4.0},  # a one-sided cap
        clips=True,
    ),
    "dro": LossSpec(
        _dro, "-(lp A - dro_beta (lp - q)^2 / 2)", {DRO_BETA: 0.05}, every_position=True
    ),
}
"""Every loss, by the name the service knows it by, in the order the command line lists them."""

PARAMETERS: tuple[Parameter, ...] = tuple(
    dict.fromkeys(p for spec in LOSSES.values() for p in spec.defaults)
)
"""Every kind of setting the losses take, in the table's order."""


def losses_taking(parameter: Parameter) -> dict[str, float]:
    """The losses that take `parameter`, each with its default, in the table's order."""
    return {
        name: spec.defaults[parameter]
        for name, spec in LOSSES.items()
        if parameter in spec.defaults
    }


@dataclass(frozen=True, slots=True, init=False)
class Loss:
    """A loss and every one of its settings: the given ones, the table's defaults for the rest.

    `Loss("ppo", clip_high=1.5)`; a setting is named by its `TrainConfig` field, and None
    stands for the default. ValueError for a name not in `LOSSES`, or a setting the loss does
    not take or out of its range.
    """

    name: LossName
    settings: tuple[tuple[str, float], ...]
    """(field, value) for each of the loss's settings, in its table entry's order."""

    def __init__(self, name: LossName = DEFAULT_LOSS, **given: float | None) -> None:
        spec = LOSSES.get(name)
        if spec is None:
            raise ValueError(f"the loss must be one of {', '.join(LOSSES)} (got {name!r})")
        kinds = {p.field: p for p in PARAMETERS}
        for setting, value in given.items():
            parameter = kinds.get(setting)
            if parameter is None:
                raise ValueError(
                    f"{setting} is not a setting of any loss (they are {', '.join(kinds)})"
                )
            if value is None:
                continue
            if parameter not in spec.defaults:
                takers = listed(losses_taking(parameter), "or")
                raise ValueError(
                    f"{setting} applies to the {takers} loss only (the loss is {name})"
                )
            if not parameter.allows(value):
                raise ValueError(
                    f"{setting} must be a number from {parameter.low:g} to "
                    f"{parameter.high:g} (got {value!r})"
                )
        settings = tuple(
            (p.field, default if (value := given.get(p.field)) is None else value)
            for p, default in spec.defaults.items()
        )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "settings", settings)

    @property
    def spec(self) -> LossSpec:
        return LOSSES[self.name]

    @property
    def clips(self) -> bool:
        return self.spec.clips

    @property
    def every_position(self) -> bool:
        return self.spec.every_position

    def config(self) -> dict[str, float] | None:
        """The `loss_fn_config` the service gets: every setting spelled out (None for a loss
        that has none), so the service's defaults never decide."""
        keys = [p.key for p in self.spec.defaults]
        values = [value for _, value in self.settings]
        return dict(zip(keys, values, strict=True)) or None


IMPORTANCE_SAMPLING = Loss()


def token_loss(loss: Loss, lp: float, q: float, advantage: float) -> TokenLoss:
    """One token's loss under `loss`, given the learner's logprob `lp` of the token, the
    sampler's `q`, and the advantage. See the module docstring for the formulas."""
    return loss.spec.token(lp, q, advantage, **dict(loss.settings))
