"""The GRPO arithmetic: group-relative advantages, constant groups, datums, the KL penalty.

Pure functions over plain lists. The step (`mathrl.step`) calls them; the
tests check them property by property. Nothing here knows the task, the
backend or mint (`Datum`, what a backend trains on, is the backend
contract's type). The choices, each where it is made:

- **Advantages** (`step_advantages`): each reward minus its group's mean,
  divided by a standard deviation or not (`scale_rewards`).
- **The action mask** (`episode_datum`): a datum is the whole sequence, the
  prompt, the model's turns and the environment's replies between them;
  its mask is True exactly on the positions that predict a token the model
  sampled, as the datum is built, never guessed afterwards from its values.
  Off the mask, the advantage is 0 and the sampler's logprob `q` is 0 (a
  backend refuses a datum whose mask is malformed: `mathrl.backend.check_mask`).
- **Constant groups** (`is_constant_group`): a group whose rewards are all
  equal has advantages of exactly 0. Without a KL penalty it teaches
  nothing and is not trained on (`mathrl.rollout.trained`). With one, every
  group the step sampled is trained on, constant ones included, as
  tinker-cookbook does by default (`remove_constant_reward_groups=False`):
  the penalty alone gives their tokens an advantage, and the step's `kl` is
  measured over all of them. It costs their datums, and as many base-model
  logprob requests: every completion the step sampled is trained on, not
  only those of groups whose rewards differ, which grow fewer as the policy
  saturates (`python -m mathrl --backend fake --steps 20 --kl-coef 0.1`:
  40 datums a step, against 22 on average, and 4 then 0 in the last two
  steps, when constant groups were left out).
- **The KL penalty** (`kl_penalized`): tinker-cookbook's k1 shaping of the
  advantages of the model's tokens against the base model.
- **The sampler against the learner** (`approx_kl`, `sampler_entropy`): what
  a step reports of how far the weights that trained are from those that
  sampled, and how spread the sampler's choices were; they change nothing.
- **DRO off the prompt** (`anchored`): DRO's penalty acts on every position
  of a datum and MinT takes no mask for it, so before a step trains with
  DRO, `q` off the mask is set to the policy's own logprob (one more round
  trip, from the sampler of the weights being trained, shared with the KL
  penalty's): there lp - q is about 0 (exactly 0 on the fake; how near on a
  service, `mathrl.losses`), and so is the gradient the prompt and the
  environment's tokens get. The other losses are 0 wherever A = 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from mathrl.backend import Datum


def is_constant_group(rewards_G: Sequence[float]) -> bool:
    """True when every member of the group earned the same reward.

    Compares rewards, not `reward - mean`: the seed's float test on the
    difference misses groups like [0.1, 0.1, 0.1], whose differences are
    about -1.4e-17 rather than 0.
    """
    return all(r == rewards_G[0] for r in rewards_G)


SCALES = ("none", "group", "batch")
"""How advantages are scaled (`step_advantages`)."""
STD_EPSILON = 1e-4
"""Added to a standard deviation before dividing by it, as TRL does: a near-constant group
cannot blow its advantages up."""


def step_advantages(
    rewards_P_G: Sequence[Sequence[float]], scale: str = "none"
) -> list[list[float]]:
    """Each reward minus its group's mean, divided by a standard deviation per `scale`.

    - "none" (the default; Dr. GRPO's choice, and mathrl's since its start): no division.
    - "group" (GRPO as DeepSeekMath wrote it): by the group's sample standard deviation
      plus STD_EPSILON, so every |advantage| < (G - 1) / sqrt(G) for a group of G.
    - "batch" (TRL's `scale_rewards="batch"`): by the sample standard deviation of every
      reward of the step plus STD_EPSILON; every |advantage| < 2 (N - 1) / sqrt(N) for N
      rewards in all.

    A constant group's advantages stay exactly 0.0, whatever the scale.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)} (got {scale!r})")
    centred_P_G = [group_advantages(rewards_G) for rewards_G in rewards_P_G]
    if scale == "none":
        return centred_P_G
    if scale == "batch":
        every = [r for rewards_G in rewards_P_G for r in rewards_G]
        stds_P = [_sample_std(every)] * len(rewards_P_G)
    else:
        stds_P = [_sample_std(rewards_G) for rewards_G in rewards_P_G]
    return [
        [a / (std + STD_EPSILON) for a in centred_G]
        for centred_G, std in zip(centred_P_G, stds_P, strict=True)
    ]


def _sample_std(values: Sequence[float]) -> float:
    """The sample standard deviation (n - 1 in the denominator); 0.0 for fewer than two."""
    if len(values) < 2 or is_constant_group(values):
        return 0.0
    n = len(values)
    mean = math.fsum(v / n for v in values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def kl_penalized(
    datums_D: Sequence[Datum], base_logprobs_D: Sequence[Sequence[float]], coef: float
) -> tuple[list[Datum], float]:
    """The datums with a KL penalty against the base model folded into their advantages,
    and the step's mean KL estimate (as tinker-cookbook shapes them).

    On each of the model's tokens (True in the datum's mask), `d = q - b`: the
    sampled token's logprob under the sampler minus under the base model
    (`base_logprobs_D`, one per target token). Their mean `d_mean` over the
    step's model tokens estimates KL(policy || base). Each model token's
    advantage gains `coef * (d_mean - d)`: tokens the policy likes more than
    the base did are pushed back, less liked ones forward, and the step's
    advantages keep their sum. The prompt's and the environment's tokens are
    left as they are. With `coef` 0 the datums are returned as they are.
    The base is the step-0 sampler (a LoRA starts as the base model); at a
    sampling temperature other than 1, `q` is the tempered sampler's and the
    estimate is biased.
    """
    diffs_D: list[list[float | None]] = []
    for datum, base_T in _per_token(datums_D, base_logprobs_D, "base"):
        diffs_D.append(
            [
                q - b if mine else None
                for q, b, mine in zip(datum.logprobs, base_T, datum.mask, strict=True)
            ]
        )
    every = [d for diffs_T in diffs_D for d in diffs_T if d is not None]
    mean = math.fsum(every) / len(every) if every else 0.0
    if coef == 0.0:
        return list(datums_D), mean
    shaped = [
        replace(
            datum,
            advantages=tuple(
                a if d is None else a + coef * (mean - d)
                for a, d in zip(datum.advantages, diffs_T, strict=True)
            ),
        )
        for datum, diffs_T in zip(datums_D, diffs_D, strict=True)
    ]
    return shaped, mean


def anchored(
    datums_D: Sequence[Datum], policy_logprobs_D: Sequence[Sequence[float]]
) -> list[Datum]:
    """The datums with `q` off the mask (the prompt's and the environment's tokens) set to
    the policy's own logprob of the token (`policy_logprobs_D`, one per target token, from
    the weights being trained), and left as sampled on the model's tokens.

    For a loss that acts on every position (DRO, whose penalty dro_beta (lp - q)^2 / 2 takes
    no mask): there `lp - q` is about 0, so the penalty and its gradient are about 0, and
    the prompt is not trained on. On the fake, where sampler and learner compute the same
    logprobs, they are exactly 0.
    """
    out = []
    for datum, policy_T in _per_token(datums_D, policy_logprobs_D, "policy"):
        logprobs_T = tuple(
            q if mine else p
            for q, p, mine in zip(datum.logprobs, policy_T, datum.mask, strict=True)
        )
        out.append(replace(datum, logprobs=logprobs_T))
    return out


LOG_RATIO_CAP = 700.0
"""The largest log ratio `approx_kl` takes as it is (e^700 is near the largest float): a
larger one counts as this, so the figure stays a finite number."""


def approx_kl(
    datums_D: Sequence[Datum], learner_logprobs_D: Sequence[Sequence[float]]
) -> float | None:
    """The approximate KL between the sampler and the learner on the datums' model tokens
    (True in the mask), as CleanRL computes its `approx_kl`: the mean over those tokens of
    `(r - 1) - log r`, with `log r = lp - q`, the learner's logprob minus the sampler's.

    Each term is >= 0, and 0 exactly where lp = q: on-policy at temperature 1, what the
    sampler drew and what the learner scores are the same weights' logprobs (equal on the
    fake; near, to the service's numerics). It grows with an off-policy lag, with substeps
    (a later minibatch meets weights the earlier ones moved), and at a temperature other
    than 1 (q is the tempered distribution's). None without a model token.

    On the fake, 20 steps of addition (`python -m mathrl --backend fake --steps 20`, then
    `metrics.jsonl`'s `approx_kl`): on-policy at most 5e-32 (rounding); with
    `--max-steps-off-policy 1`, 0 at step 1 (nothing lags yet), then 6e-4 to 1e-3 a step
    (mean 7e-4: the fake's logits move by at most 0.2 a step); at `--temperature 0.7`, 0.001
    to 0.1 (mean 0.02), thirty times the lag's, for the gap is the temperature's, not the
    weights'; both together, mean 0.01. The sampler's entropy falls meanwhile from 3.3 nats
    a token to 0.6 (0.15 at temperature 0.7) as the policy settles on its answers.
    """
    terms = []
    for datum, learner_T in _per_token(datums_D, learner_logprobs_D, "learner"):
        for lp, q, mine in zip(learner_T, datum.logprobs, datum.mask, strict=True):
            if mine:
                log_r = min(lp - q, LOG_RATIO_CAP)
                terms.append(math.expm1(log_r) - log_r)
    return math.fsum(terms) / len(terms) if terms else None


def _per_token(
    datums_D: Sequence[Datum], logprobs_D: Sequence[Sequence[float]], whose: str
) -> list[tuple[Datum, Sequence[float]]]:
    """Each datum with its `whose` logprobs: a list per datum, one per target token;
    ValueError naming `whose` and the counts where they differ."""
    if len(logprobs_D) != len(datums_D):
        raise ValueError(
            f"one list of {whose} logprobs per datum (got {len(logprobs_D)} for {len(datums_D)})"
        )
    pairs = list(zip(datums_D, logprobs_D, strict=True))
    for datum, logprobs_T in pairs:
        if len(logprobs_T) != len(datum.target_tokens):
            raise ValueError(
                f"one {whose} logprob per target token (got {len(logprobs_T)} for "
                f"{len(datum.target_tokens)})"
            )
    return pairs


def sampler_entropy(logprobs_T: Sequence[float]) -> float | None:
    """The sampler's entropy per token, estimated from what it sampled: the mean of `-q`
    over the sampled tokens' logprobs (the distribution they were drawn from, at the
    sampling temperature). None without a token."""
    return -math.fsum(logprobs_T) / len(logprobs_T) if logprobs_T else None


def minibatches(datums_D: Sequence[Datum], count: int) -> list[list[Datum]]:
    """`datums_D` in order, split into min(count, len(datums_D)) runs of near-equal size
    (the first ones one longer where they cannot all be equal)."""
    if count < 1:
        raise ValueError(f"count must be at least 1 (got {count})")
    k = min(count, len(datums_D))
    if k == 0:
        return []
    size, extra = divmod(len(datums_D), k)
    out, start = [], 0
    for i in range(k):
        end = start + size + (i < extra)
        out.append(list(datums_D[start:end]))
        start = end
    return out


def group_advantages(rewards_G: Sequence[float]) -> list[float]:
    """Return each reward minus the group mean (GRPO without std scaling).

    A constant group gets exactly 0.0 for every member (whatever the rewards,
    even infinite ones): it carries no signal of its own. In a
    non-constant group every reward must be finite, and the advantages must
    be representable: rewards spanning more than the largest float raise.
    """
    if is_constant_group(rewards_G):
        return [0.0] * len(rewards_G)
    for r in rewards_G:
        if not math.isfinite(r):
            raise ValueError(f"rewards must be finite (got {r!r} in {list(rewards_G)!r})")
    n = len(rewards_G)
    try:
        mean = math.fsum(rewards_G) / n
    except OverflowError:  # the sum passes the largest float; the mean need not
        mean = math.fsum(r / n for r in rewards_G)
    advantages_G = [r - mean for r in rewards_G]
    if not all(math.isfinite(a) for a in advantages_G):
        raise ValueError(
            f"rewards span too wide a range for float advantages (got {list(rewards_G)!r})"
        )
    return advantages_G


def build_datum(
    prompt_T: Sequence[int],
    completion_T: Sequence[int],
    completion_logprobs_T: Sequence[float] | None,
    advantage: float,
) -> Datum | None:
    """Build the importance-sampling datum for one sampled completion.

    `full = prompt + completion`; the model reads `full[:-1]` and is scored on
    `full[1:]`. The len(prompt) - 1 positions that predict prompt tokens are
    off the mask, with logprob 0 and advantage 0; the completion's are on it.

    Returns None for an empty completion (there is nothing to train on).
    Raises ValueError for an empty prompt, or when the sampler's logprobs are
    missing or do not match the completion token for token: substituting
    zeros would silently turn the importance ratio into p_theta itself.
    """
    return episode_datum(prompt_T, [completion_T], [completion_logprobs_T], [], advantage)


def episode_datum(
    prompt_T: Sequence[int],
    turns_K_T: Sequence[Sequence[int]],
    logprobs_K_T: Sequence[Sequence[float] | None],
    replies_K_T: Sequence[Sequence[int]],
    advantage: float,
) -> Datum | None:
    """One datum for a whole episode: the model's K turns, the environment's K - 1 replies between.

    `full = prompt + turn 1 + reply 1 + turn 2 + ... + turn K`, every token
    as it was sampled or rendered, never decoded and encoded again. The
    positions that predict a model's token are on the mask and carry its
    sampling logprob and `advantage`; those that predict a prompt or reply
    token are off it and carry 0 and 0, so the environment's words get no
    gradient. With one turn this is exactly `build_datum`'s datum. None when
    the model wrote no token at all.
    """
    if not prompt_T:
        raise ValueError("a datum needs a non-empty prompt (got 0 prompt tokens)")
    if not len(turns_K_T) == len(logprobs_K_T) == len(replies_K_T) + 1:
        raise ValueError(
            f"an episode of {len(turns_K_T)} turns needs as many logprob lists "
            f"(got {len(logprobs_K_T)}) and one reply fewer (got {len(replies_K_T)})"
        )
    if not any(turns_K_T):
        return None
    full_T = list(prompt_T)
    logprobs_T: list[float] = [0.0] * (len(prompt_T) - 1)
    advantages_T: list[float] = [0.0] * (len(prompt_T) - 1)
    mask_T: list[bool] = [False] * (len(prompt_T) - 1)
    for k, (turn_T, turn_logprobs_T) in enumerate(zip(turns_K_T, logprobs_K_T, strict=True)):
        if turn_T and turn_logprobs_T is None:
            raise ValueError(
                "the sampler returned no logprobs for a completion of "
                f"{len(turn_T)} tokens; the importance-sampling loss needs them"
            )
        if turn_T and len(turn_logprobs_T or ()) != len(turn_T):
            raise ValueError(
                f"completion has {len(turn_T)} tokens but {len(turn_logprobs_T or ())} "
                "sampler logprobs; they must match one to one"
            )
        full_T += turn_T
        logprobs_T += turn_logprobs_T or ()
        advantages_T += [advantage] * len(turn_T)
        mask_T += [True] * len(turn_T)
        if k < len(replies_K_T):
            full_T += replies_K_T[k]
            logprobs_T += [0.0] * len(replies_K_T[k])
            advantages_T += [0.0] * len(replies_K_T[k])
            mask_T += [False] * len(replies_K_T[k])
    return Datum(
        model_input=tuple(full_T[:-1]),
        target_tokens=tuple(full_T[1:]),
        logprobs=tuple(logprobs_T),
        advantages=tuple(advantages_T),
        mask=tuple(mask_T),
    )
