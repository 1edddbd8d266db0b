"""group_advantages, constant groups, build_datum and episode_datum with their action mask,
the KL penalty, DRO's anchor off the mask, and combining minibatches."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import strategies as st_
from mathrl.adapter import Response
from mathrl.backend import Completion, Datum, TrainResult, check_datums, check_train_step
from mathrl.config import TrainConfig
from mathrl.episodes import Episode, Turn
from mathrl.grpo import (
    LOG_RATIO_CAP,
    _sample_std,
    anchored,
    approx_kl,
    build_datum,
    episode_datum,
    group_advantages,
    is_constant_group,
    kl_penalized,
    minibatches,
    sampler_entropy,
    step_advantages,
)
from mathrl.resolved import as_task
from mathrl.rollout import datums_of, trained
from mathrl.step import combined
from mathrl.tasks.addition import MathAdapter

ADDITION = as_task(MathAdapter())


@given(st_.reward_groups)
def test_advantages_sum_to_about_zero(rewards_G: list[float]) -> None:
    advantages_G = group_advantages(rewards_G)
    assert len(advantages_G) == len(rewards_G)
    scale = max(abs(r) for r in rewards_G) or 1.0
    assert abs(math.fsum(advantages_G)) <= 1e-9 * scale * len(rewards_G)


def one_turn(tokens_T: Sequence[int]) -> Episode:
    """An episode of one turn in which the model wrote `tokens_T`."""
    return Episode((Turn(Completion(tuple(tokens_T), (-0.5,) * len(tokens_T)), Response("")),))


@given(st_.rewards, st_.reward_groups, st_.reward_groups, st.booleans(), st_.kl_coefs)
def test_a_constant_group_gets_exact_zeros_and_trains_only_with_a_kl_penalty(
    r: float, shape: list[float], other_G: list[float], constant_first: bool, kl_coef: float
) -> None:
    assume(not is_constant_group(other_G))
    rewards_G = [r] * len(shape)
    assert is_constant_group(rewards_G)
    assert group_advantages(rewards_G) == [0.0] * len(rewards_G)
    # Beside a group that is not constant, in either order: without a KL penalty none of its
    # episodes gives a datum, and each of the other group's does; with one, each of both
    # groups' does (the penalty alone teaches it). The prompts tell the groups apart.
    groups = [([1, 1], rewards_G), ([2, 2], other_G)]
    if not constant_first:
        groups.reverse()
    prompts_P_T = [prompt_T for prompt_T, _ in groups]
    rewards_P_G = [rewards for _, rewards in groups]
    episodes_P_G = [[one_turn([5, 6]) for _ in rewards] for rewards in rewards_P_G]
    advantages_P_G = step_advantages(rewards_P_G)
    responses_P_G = [[e.final for e in episodes_G] for episodes_G in episodes_P_G]
    config = TrainConfig(kl_coef=kl_coef)
    trained_P_G = trained(ADDITION, config, rewards_P_G, responses_P_G)
    datums_D = datums_of(prompts_P_T, episodes_P_G, advantages_P_G, trained_P_G)
    if kl_coef:
        assert [d.model_input for d in datums_D] == [(*p, 5) for p, g in groups for _ in g]
    else:
        assert [d.model_input for d in datums_D] == [(2, 2, 5)] * len(other_G)


def test_worked_example_of_which_groups_train() -> None:
    # Rewards [1, 0] (mean 0.5: advantages +0.5, -0.5) and a constant [1, 1] (0, 0).
    rewards_P_G = [[1.0, 0.0], [1.0, 1.0]]
    responses_P_G = [[Response(" 42\n", "stop", "\n")] * 2] * 2
    # Without a KL penalty only the first group teaches; with kl_coef 0.1 both are trained on.
    assert trained(ADDITION, TrainConfig(), rewards_P_G, responses_P_G) == [
        [True, True],
        [False, False],
    ]
    assert trained(ADDITION, TrainConfig(kl_coef=0.1), rewards_P_G, responses_P_G) == [
        [True, True],
        [True, True],
    ]


@given(st_.reward_groups)
def test_a_non_constant_group_is_kept_and_has_signal(rewards_G: list[float]) -> None:
    assume(len(set(rewards_G)) > 1)
    assert not is_constant_group(rewards_G)
    assert any(a != 0.0 for a in group_advantages(rewards_G))


@given(st_.binary_reward_groups)
def test_binary_rewards_above_the_mean_get_positive_advantage(rewards_G: list[float]) -> None:
    for r, a in zip(rewards_G, group_advantages(rewards_G), strict=True):
        assert (a > 0) == (r == 1.0) or is_constant_group(rewards_G)


@given(st_.any_finite_rewards)
def test_any_finite_rewards_give_finite_advantages_or_a_clear_error(rewards_G: list[float]) -> None:
    # |r - mean| <= max - min: while that span is a float, advantages always are.
    # Past it, some groups still fit ([1.7e308, -1.7e308]); the rest are refused.
    refusal = ""
    try:
        advantages_G = group_advantages(rewards_G)
    except ValueError as exc:
        refusal = str(exc)
    if refusal:
        assert not math.isfinite(max(rewards_G) - min(rewards_G))
        assert "too wide a range" in refusal
        return
    assert all(math.isfinite(a) for a in advantages_G)
    assert (max(advantages_G) > 0 > min(advantages_G)) or is_constant_group(rewards_G)


def test_advantage_worked_examples() -> None:
    # mean 0.5 -> advantages +0.5, -0.5, +0.5, -0.5
    assert group_advantages([1.0, 0.0, 1.0, 0.0]) == [0.5, -0.5, 0.5, -0.5]
    # mean 0.25 -> 0.75, -0.25, -0.25, -0.25
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == [0.75, -0.25, -0.25, -0.25]
    # The seed's check: 0.1 - mean([0.1] * 3) is -1.4e-17, not 0. Ours is exact.
    assert 0.1 - sum([0.1] * 3) / 3 != 0.0
    assert group_advantages([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]
    assert is_constant_group([0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="finite"):
        group_advantages([0.0, math.nan])
    # Equal rewards carry no signal, even infinite ones: exact zeros.
    assert group_advantages([math.inf] * 3) == [0.0, 0.0, 0.0]
    # fsum overflows at 3.4e308, the mean (1.13e308) does not: 1.7e308 - 1.13e308 = 5.7e307
    assert group_advantages([1.7e308, 1.7e308, 0.0])[0] == pytest.approx(5.667e307, rel=1e-3)
    # 1.7e308 - (-1.7e308) is past the largest float: refused, not silently infinite
    with pytest.raises(ValueError, match="too wide a range"):
        group_advantages([1.7e308, 1.7e308, -1.7e308])


@given(st_.prompts_T, st_.completions(), st_.rewards)
def test_datum_alignment(
    prompt_T: list[int], completion: tuple[list[int], list[float]], advantage: float
) -> None:
    tokens_T, logprobs_T = completion
    datum = build_datum(prompt_T, tokens_T, logprobs_T, advantage)
    if not tokens_T:
        assert datum is None
        return
    assert datum is not None
    n = len(prompt_T) + len(tokens_T) - 1
    assert set(datum.lengths().values()) == {n}
    full = [*prompt_T, *tokens_T]
    assert list(datum.model_input) == full[:-1]
    assert list(datum.target_tokens) == full[1:]
    n_prompt = len(prompt_T) - 1
    assert datum.mask == (False,) * n_prompt + (True,) * len(tokens_T)
    assert datum.advantages[:n_prompt] == (0.0,) * n_prompt
    assert datum.logprobs[:n_prompt] == (0.0,) * n_prompt
    assert datum.advantages[n_prompt:] == (advantage,) * len(tokens_T)
    assert list(datum.logprobs[n_prompt:]) == logprobs_T


def test_datum_worked_example() -> None:
    # prompt [1, 2, 3] + completion [4, 5] -> full [1, 2, 3, 4, 5]
    # inputs [1, 2, 3, 4], targets [2, 3, 4, 5]; two prompt positions carry zeros.
    datum = build_datum([1, 2, 3], [4, 5], [-0.1, -0.2], 0.5)
    assert datum == Datum(
        model_input=(1, 2, 3, 4),
        target_tokens=(2, 3, 4, 5),
        logprobs=(0.0, 0.0, -0.1, -0.2),
        advantages=(0.0, 0.0, 0.5, 0.5),
        mask=(False, False, True, True),  # targets 4 and 5 are the model's
    )
    assert datum.model_tokens == 2


def test_datum_refuses_missing_or_misaligned_logprobs() -> None:
    # The messages are whole sentences: they reach the user as they are.
    with pytest.raises(ValueError, match=r"^the sampler returned no logprobs for a completion "):
        build_datum([1], [2, 3], None, 1.0)
    with pytest.raises(ValueError, match="2 tokens but 1 sampler logprobs"):
        build_datum([1], [2, 3], [-0.5], 1.0)
    with pytest.raises(ValueError, match=r"^a datum needs a non-empty prompt \(got 0 prompt "):
        build_datum([], [2], [-0.5], 1.0)
    assert build_datum([1], [], None, 1.0) is None  # empty completion: no datum


@given(st_.prompts_T, st_.episodes(), st_.rewards)
def test_episode_datum_alignment(
    prompt_T: list[int],
    episode: tuple[list[list[int]], list[list[float]], list[list[int]]],
    advantage: float,
) -> None:
    turns_K_T, logprobs_K_T, replies_K_T = episode
    datum = episode_datum(prompt_T, turns_K_T, logprobs_K_T, replies_K_T, advantage)
    if not any(turns_K_T):
        assert datum is None
        return
    assert datum is not None
    # The sequence is every token in order: prompt, turn 1, reply 1, ..., turn K.
    full = list(prompt_T)
    owner = [False] * len(prompt_T)  # True where the model sampled the token
    for k, turn_T in enumerate(turns_K_T):
        full += turn_T
        owner += [True] * len(turn_T)
        if k < len(replies_K_T):
            full += replies_K_T[k]
            owner += [False] * len(replies_K_T[k])
    assert list(datum.model_input) == full[:-1]
    assert list(datum.target_tokens) == full[1:]
    assert set(datum.lengths().values()) == {len(full) - 1}
    assert list(datum.mask) == owner[1:]  # the mask is who wrote each target token
    # Position i predicts full[i + 1]: the model's tokens carry the advantage and their
    # sampling logprobs, in order; the prompt's and the environment's carry zeros.
    sampled = [lp for logprobs_T in logprobs_K_T for lp in logprobs_T]
    assert [a for a, mine in zip(datum.advantages, owner[1:], strict=True) if mine] == [
        advantage
    ] * len(sampled)
    assert [lp for lp, mine in zip(datum.logprobs, owner[1:], strict=True) if mine] == sampled
    others = [
        (a, lp)
        for a, lp, mine in zip(datum.advantages, datum.logprobs, owner[1:], strict=True)
        if not mine
    ]
    assert set(others) <= {(0.0, 0.0)}
    check_datums([datum], vocab_size=151_936)


@given(st_.prompts_T, st_.completions(), st_.rewards)
def test_a_one_turn_episode_is_build_datums_datum(
    prompt_T: list[int], completion: tuple[list[int], list[float]], advantage: float
) -> None:
    tokens_T, logprobs_T = completion
    one = episode_datum(prompt_T, [tokens_T], [logprobs_T], [], advantage)
    assert one == build_datum(prompt_T, tokens_T, logprobs_T, advantage)


def test_episode_datum_worked_example() -> None:
    # prompt [1, 2] + turn [3, 4] + reply [7, 8] + turn [5]
    # -> full [1, 2, 3, 4, 7, 8, 5]: inputs full[:-1], targets full[1:].
    # Targets 3, 4 and 5 are the model's (advantage 0.5, their logprobs);
    # target 2 is the prompt's and targets 7, 8 the environment's: zeros.
    datum = episode_datum([1, 2], [[3, 4], [5]], [[-0.1, -0.2], [-0.3]], [[7, 8]], 0.5)
    assert datum == Datum(
        model_input=(1, 2, 3, 4, 7, 8),
        target_tokens=(2, 3, 4, 7, 8, 5),
        logprobs=(0.0, -0.1, -0.2, 0.0, 0.0, -0.3),
        advantages=(0.0, 0.5, 0.5, 0.0, 0.0, 0.5),
        mask=(False, True, True, False, False, True),
    )


def test_episode_datum_refuses_a_mismatched_episode() -> None:
    with pytest.raises(ValueError, match=r"^an episode of 2 turns needs as many logprob lists"):
        episode_datum([1], [[2], [3]], [[-0.1], [-0.2]], [], 1.0)
    with pytest.raises(ValueError, match="got 1\\) and one reply fewer"):
        episode_datum([1], [[2], [3]], [[-0.1]], [[9]], 1.0)


@given(st_.prompts_T, st_.completions(), st_.rewards)
def test_built_datums_pass_the_service_checks(
    prompt_T: list[int], completion: tuple[list[int], list[float]], advantage: float
) -> None:
    datum = build_datum(prompt_T, *completion, advantage)
    if datum is None:
        return
    check_datums([datum], vocab_size=151_936)
    check_train_step([datum], 1e-4, vocab_size=None)
    # Any field one entry short is refused, and the message names every length.
    for name in ("model_input", "target_tokens", "logprobs", "advantages", "mask"):
        short = replace(datum, **{name: getattr(datum, name)[:-1]})
        with pytest.raises(ValueError, match=f"{name}={len(getattr(datum, name)) - 1}"):
            check_datums([short], vocab_size=None)


# --- reward scaling and minibatches --------------------------------------------------------


@given(st.lists(st_.reward_groups, min_size=1, max_size=6))
def test_no_scaling_is_the_group_mean_baseline_of_before(rewards_P_G: list[list[float]]) -> None:
    assert step_advantages(rewards_P_G, "none") == [group_advantages(g) for g in rewards_P_G]


@given(st.lists(st_.reward_groups, min_size=1, max_size=6), st_.scales)
def test_scaled_advantages_keep_sign_and_zero_out_constant_groups(
    rewards_P_G: list[list[float]], scale: str
) -> None:
    plain, scaled = step_advantages(rewards_P_G, "none"), step_advantages(rewards_P_G, scale)
    for rewards_G, plain_G, scaled_G in zip(rewards_P_G, plain, scaled, strict=True):
        if is_constant_group(rewards_G):
            assert scaled_G == [0.0] * len(rewards_G)
        for p, s in zip(plain_G, scaled_G, strict=True):
            assert (p > 0) == (s > 0)
            assert (p < 0) == (s < 0)


@given(st.lists(st_.reward_groups, min_size=1, max_size=6))
def test_near_zero_spread_never_makes_huge_advantages(rewards_P_G: list[list[float]]) -> None:
    # |r - mean| <= s (G - 1) / sqrt(G) for the sample std s, and s / (s + eps) < 1; the batch
    # bound doubles it, since a group's mean is within the batch's range.
    for rewards_G, adv_G in zip(rewards_P_G, step_advantages(rewards_P_G, "group"), strict=True):
        g = len(rewards_G)
        assert all(abs(a) <= (g - 1) / math.sqrt(g) + 1e-9 for a in adv_G)
    n = sum(map(len, rewards_P_G))
    batch = step_advantages(rewards_P_G, "batch")
    assert all(abs(a) <= 2 * (n - 1) / math.sqrt(n) + 1e-9 for adv_G in batch for a in adv_G)


def test_a_tiny_spread_gives_tiny_advantages_not_unit_ones() -> None:
    # Rewards 1 and 1 + 2e-12: each is 1e-12 from the mean; their sample std is 1.41e-12, far
    # below eps = 1e-4, so each advantage is about 1e-12 / 1e-4 = 1e-8, not +-0.7.
    [[a, b]] = step_advantages([[1.0, 1.0 + 2e-12]], "group")
    assert abs(a) < 1e-7
    assert abs(b) < 1e-7


def test_worked_example_of_the_three_scales() -> None:
    # One right answer in a group of 4: mean 0.25, centred [0.75, -0.25, -0.25, -0.25].
    # Sample std: sqrt((0.5625 + 3 * 0.0625) / 3) = sqrt(0.25) = 0.5; plus eps 1e-4 -> 0.5001.
    rewards = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    none, group, batch = (step_advantages(rewards, s) for s in ("none", "group", "batch"))
    assert none[0] == [0.75, -0.25, -0.25, -0.25]
    assert group[0] == pytest.approx(
        [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001]
    )
    # Second group: mean 0.5, centred +-0.5, std sqrt(4 * 0.25 / 3) = 0.57735.
    assert group[1] == pytest.approx(
        [0.5 / 0.57745, 0.5 / 0.57745, -0.5 / 0.57745, -0.5 / 0.57745], rel=1e-4
    )
    # The batch of 8: three 1s, mean 0.375, std sqrt((3 * 0.390625 + 5 * 0.140625) / 7) = 0.51755.
    assert batch[0][0] == pytest.approx(0.75 / 0.51765, rel=1e-4)


def test_an_unknown_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="scale must be one of none, group, batch"):
        step_advantages([[0.0, 1.0]], "std")


@given(st.lists(st.integers(), max_size=40), st.integers(1, 12))
def test_minibatches_keep_every_datum_in_order_in_near_equal_runs(
    items: list[int], count: int
) -> None:
    datums = [d for t in items if (d := build_datum([1], [t % 250], [-0.5], 1.0)) is not None]
    assert len(datums) == len(items)  # a one-token completion always makes a datum
    runs = minibatches(datums, count)
    assert [d for run in runs for d in run] == datums
    assert len(runs) == min(count, len(datums))
    sizes = [len(run) for run in runs]
    assert sizes == sorted(sizes, reverse=True)
    assert not sizes or sizes[0] - sizes[-1] <= 1


def test_worked_example_of_minibatches() -> None:
    # 7 datums in 3 minibatches: 7 = 3 + 2 + 2.
    datums = [d for t in range(7) if (d := build_datum([1], [t], [-0.5], 1.0)) is not None]
    assert [len(run) for run in minibatches(datums, 3)] == [3, 2, 2]
    with pytest.raises(ValueError, match="count must be at least 1"):
        minibatches(datums, 0)
    assert minibatches([], 3) == []  # no datums: no minibatch
    assert minibatches(datums[:1], 3) == [datums[:1]]  # one datum: one minibatch of it


def test_the_standard_deviation_worked_examples() -> None:
    # [1, 2, 3]: mean 2, squares 1 + 0 + 1 = 2, over n - 1 = 2: 1.
    assert _sample_std([1.0, 2.0, 3.0]) == 1.0
    # One value has none; a constant group's is exactly 0, where the arithmetic would leave
    # a trace (0.9 / 3 three times adds up to 0.8999999999999999).
    assert _sample_std([5.0]) == 0.0
    assert _sample_std([0.9, 0.9, 0.9]) == 0.0
    assert _sample_std([]) == 0.0


# --- the KL penalty, on the mask -------------------------------------------------------------


@given(st_.episodes(), st.floats(-3, 3), st.floats(0.0, 2.0), st.floats(-2.0, 0.0))
def test_the_kl_penalty_moves_only_the_models_tokens_and_keeps_the_sum(
    episode: tuple[list[list[int]], list[list[float]], list[list[int]]],
    advantage: float,
    coef: float,
    base: float,
) -> None:
    turns, logprobs, replies = episode
    datum = episode_datum([5, 6], turns, logprobs, replies, advantage)
    assume(datum is not None)
    assert datum is not None
    base_T = [base + 0.01 * i for i in range(len(datum.target_tokens))]
    [shaped], kl = kl_penalized([datum], [base_T], coef)
    for mine, before, after in zip(datum.mask, datum.advantages, shaped.advantages, strict=True):
        if not mine:
            assert after == before  # the prompt's and the environment's tokens: untouched
    assert (shaped.mask, shaped.logprobs) == (datum.mask, datum.logprobs)
    # sum over the model's tokens of coef * (mean - d) is 0: the advantages keep their sum.
    assert math.fsum(shaped.advantages) == pytest.approx(math.fsum(datum.advantages), abs=1e-6)
    # The estimate is over every model token, whatever its logprob or advantage (0 included).
    diffs = [q - b for q, b, mine in zip(datum.logprobs, base_T, datum.mask, strict=True) if mine]
    assert kl == pytest.approx(math.fsum(diffs) / len(diffs))
    assert kl_penalized([datum], [base_T], 0.0) == ([datum], kl)


def test_worked_example_of_the_kl_penalty() -> None:
    # Prompt [1, 2], completion [3, 4] sampled with logprobs -0.5 and -1.0, advantage 1.
    # The base model gave them -1.0 and -1.0: d = 0.5 and 0.0, mean 0.25 (the KL estimate).
    # With coef 0.2: 1 + 0.2 * (0.25 - 0.5) = 0.95 and 1 + 0.2 * (0.25 - 0.0) = 1.05.
    datum = build_datum([1, 2], [3, 4], [-0.5, -1.0], 1.0)
    assert datum is not None
    [shaped], kl = kl_penalized([datum], [[-3.0, -1.0, -1.0]], 0.2)
    assert kl == 0.25
    assert shaped.advantages == pytest.approx((0.0, 0.95, 1.05))
    with pytest.raises(ValueError, match="one base logprob per target token"):
        kl_penalized([datum], [[-1.0]], 0.2)
    with pytest.raises(ValueError, match="one list of base logprobs per datum"):
        kl_penalized([datum], [], 0.2)
    # coef 1: 1 + (0.25 - 0.5) = 0.75 and 1 + (0.25 - 0.0) = 1.25.
    [whole], _ = kl_penalized([datum], [[-3.0, -1.0, -1.0]], 1.0)
    assert whole.advantages == pytest.approx((0.0, 0.75, 1.25))
    # coef 0: the datums as they are, and the estimate all the same.
    assert kl_penalized([datum], [[-3.0, -1.0, -1.0]], 0.0) == ([datum], 0.25)
    # No datum: nothing to shape, and an estimate of 0.
    assert kl_penalized([], [], 0.2) == ([], 0.0)


def test_a_datum_whose_fields_disagree_in_length_is_refused_not_cut_short() -> None:
    # The mask, the sampler's logprobs or the advantages one short of the target tokens: a
    # zip that stopped at the shortest would shape, anchor or compare the rest silently.
    datum = build_datum([1, 2], [3, 4], [-0.5, -1.0], 1.0)
    assert datum is not None
    other = [-1.0, -1.0, -1.0]  # one per target token
    for short in (
        replace(datum, mask=datum.mask[:-1]),
        replace(datum, logprobs=datum.logprobs[:-1]),
        replace(datum, advantages=datum.advantages[:-1]),
        replace(datum, mask=datum.mask[:-1], advantages=datum.advantages[:-1]),
        replace(datum, logprobs=datum.logprobs[:-1], advantages=datum.advantages[:-1]),
    ):
        with pytest.raises(ValueError, match="zip"):
            kl_penalized([short], [other], 0.2)
        if len(short.advantages) == len(datum.advantages):
            with pytest.raises(ValueError, match="zip"):
                anchored([short], [other])
            with pytest.raises(ValueError, match="zip"):
                approx_kl([short], [other])


def test_a_certain_token_of_a_member_at_its_groups_mean_is_still_the_models() -> None:
    # The audit's case: rewards [0, 0.5, 1] have mean 0.5, so the middle member's advantage is
    # exactly 0; its first token was near-certain, sampled with logprob exactly 0.0. A guess by
    # "q != 0 or A != 0" would leave it out; the mask keeps it.
    [_, middle, _] = group_advantages([0.0, 0.5, 1.0])
    assert middle == 0.0
    datum = build_datum([1], [3, 4], [0.0, -1.0], middle)
    assert datum is not None
    # Base logprobs -0.5 and -1.0: d = 0.5 and 0.0 over both tokens, mean 0.25 (the guess: 0.0).
    # The advantages become 0.1 * (0.25 - 0.5) = -0.025 and 0.1 * (0.25 - 0) = +0.025.
    [shaped], kl = kl_penalized([datum], [[-0.5, -1.0]], 0.1)
    assert kl == 0.25
    assert shaped.advantages == pytest.approx((-0.025, 0.025))


# --- DRO's anchor off the mask ----------------------------------------------------------------


@given(st_.episode_datums(), st.data())
def test_the_anchor_gives_q_off_the_mask_the_policys_logprob_and_keeps_the_rest(
    datum: Datum, data: st.DataObject
) -> None:
    n = len(datum.target_tokens)
    policy_T = data.draw(st.lists(st_.logprobs, min_size=n, max_size=n))
    [held] = anchored([datum], [policy_T])
    assert replace(held, logprobs=datum.logprobs) == datum  # only q changes
    for q, before, own, mine in zip(held.logprobs, datum.logprobs, policy_T, datum.mask,
                                    strict=True):  # fmt: skip
        assert q == (before if mine else own)
    check_datums([held], vocab_size=None)  # still a datum the service takes


def test_worked_example_of_the_anchor() -> None:
    # Prompt [1, 2, 3], completion [4] sampled at -0.7: positions 0 and 1 predict prompt
    # tokens (q 0.0 as built). The policy gives the three targets -2.1, -0.4 and -0.6:
    # q becomes -2.1, -0.4 off the mask and stays -0.7 on it, so DRO's lp - q is 0 there.
    datum = build_datum([1, 2, 3], [4], [-0.7], 1.0)
    assert datum is not None
    [held] = anchored([datum], [[-2.1, -0.4, -0.6]])
    assert held.logprobs == (-2.1, -0.4, -0.7)
    with pytest.raises(ValueError, match=r"one policy logprob per target token \(got 1 for 3\)"):
        anchored([datum], [[-1.0]])
    with pytest.raises(ValueError, match="one list of policy logprobs per datum"):
        anchored([datum], [])


# --- a malformed mask is refused -------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "advantages", "message"),
    [
        # Three positions, the last the model's: a mask of two is a length mismatch.
        ((False, True), (0.0, 0.0, 1.0), r"mask=2\)$"),
        # Position 1 is not the model's but carries advantage 0.5: it would train the prompt.
        ((False, False, True), (0.0, 0.5, 1.0),
         r"^datum 0: position 1 is not the model's \(mask False\) but has advantage 0\.5; "),
        # No position is the model's: nothing of the model's to train on.
        ((False, False, False), (0.0, 0.0, 0.0),
         r"^datum 0: the mask marks none of its 3 positions as the model's"),
        # 0.5 is neither True nor False.
        ((False, 0.5, True), (0.0, 0.0, 1.0),
         r"^datum 0: mask entries must be True or False \(got 0\.5 at position 1\)$"),
    ],
)  # fmt: skip
def test_a_malformed_mask_is_refused_at_submission(
    mask: tuple[bool, ...], advantages: tuple[float, ...], message: str
) -> None:
    datum = Datum((1, 2, 3), (2, 3, 4), (0.0, 0.0, -0.5), advantages, mask)
    with pytest.raises(ValueError, match=message):
        check_train_step([datum], 1e-4, vocab_size=None)


@given(st_.prompts_T, st_.completions(), st_.rewards, st.data())
def test_any_advantage_off_the_mask_is_refused(
    prompt_T: list[int],
    completion: tuple[list[int], list[float]],
    advantage: float,
    data: st.DataObject,
) -> None:
    datum = build_datum(prompt_T, *completion, advantage)
    assume(datum is not None and not all(datum.mask))
    assert datum is not None
    off = data.draw(st.sampled_from([i for i, mine in enumerate(datum.mask) if not mine]))
    a = data.draw(st_.advantages.filter(bool))
    wrong = replace(datum, advantages=tuple(a if i == off else x for i, x in
                                            enumerate(datum.advantages)))  # fmt: skip
    with pytest.raises(ValueError, match=f"position {off} is not the model's"):
        check_datums([wrong], vocab_size=None)


# --- combining minibatches ---------------------------------------------------------------------


@given(st_.minibatch_results())
def test_minibatch_results_combine_by_adding_losses_and_weighting_the_clip_by_tokens(
    minibatches_M: list[tuple[float, float, int]],
) -> None:
    results = [TrainResult(loss, {"loss:sum": loss, "clipped:frac": f}) for loss, f, _ in
               minibatches_M]  # fmt: skip
    tokens_M = [tokens for _, _, tokens in minibatches_M]
    total = combined(results, tokens_M)
    assert total.loss == pytest.approx(math.fsum(loss for loss, _, _ in minibatches_M))
    assert total.metrics["loss:sum"] == pytest.approx(total.loss)
    # The share of all the step's model tokens clipped: clipped counts add, tokens add.
    clipped = math.fsum(f * tokens for _, f, tokens in minibatches_M)
    assert total.metrics["clipped:frac"] == pytest.approx(clipped / sum(tokens_M))


def test_worked_example_of_combining_minibatches() -> None:
    # Two minibatches: losses -1.5 and 0.5 add to -1.0. Clip fractions 0.1 of 30 model tokens
    # (3 clipped) and 0.3 of 10 (3 clipped): 6 of 40 = 0.15, not their plain mean 0.2. A
    # metric only the second reported (0.7) is its own mean.
    first = TrainResult(-1.5, {"loss:sum": -1.5, "clipped:frac": 0.1})
    second = TrainResult(0.5, {"loss:sum": 0.5, "clipped:frac": 0.3, "optim:lr": 0.7})
    total = combined([first, second], [30, 10])
    assert total.loss == -1.0
    assert total.metrics == pytest.approx({"loss:sum": -1.0, "clipped:frac": 0.15, "optim:lr": 0.7})
    # Minibatches of no model token at all (not a datum a backend takes): the plain mean.
    assert combined([first, second], [0, 0]).metrics["clipped:frac"] == pytest.approx(0.2)
    # One model token in all: it is the first minibatch's, so its 0.1 is the step's share.
    assert combined([first, second], [1, 0]).metrics["clipped:frac"] == pytest.approx(0.1)
    # One token count per minibatch.
    with pytest.raises(ValueError, match="zip"):
        combined([first, second], [30])


# -- the sampler against the learner ---------------------------------------------------


@given(st_.episode_datums(), st.floats(-3.0, 3.0))
def test_the_approximate_kl_is_zero_on_policy_and_positive_apart(
    datum: Datum, shift: float
) -> None:
    # lp = q on every model token: exactly 0. Moved by `shift` on them: (e^s - 1) - s each,
    # never negative, and 0 only at s = 0. Off the mask, lp does not count.
    same = [q if mine else -9.0 for q, mine in zip(datum.logprobs, datum.mask, strict=True)]
    assert approx_kl([datum], [same]) == 0.0
    moved = [lp + shift if mine else lp for lp, mine in zip(same, datum.mask, strict=True)]
    kl = approx_kl([datum], [moved])
    assert kl is not None
    assert math.isclose(kl, math.expm1(shift) - shift, rel_tol=1e-9, abs_tol=1e-12)
    assert kl >= 0.0


def test_worked_example_of_the_approximate_kl_and_the_entropy() -> None:
    # Prompt [1, 2], completion [3, 4] sampled at q = log 0.5 each; the learner gives
    # log 0.25 and log 0.5: log r = -0.693 and 0, so (0.5 - 1 + 0.693) and 0, mean 0.0966.
    datum = build_datum([1, 2], [3, 4], [math.log(0.5)] * 2, 1.0)
    assert datum is not None
    learner = [-5.0, math.log(0.25), math.log(0.5)]  # the prompt's -5.0 is off the mask
    expected = ((0.5 - 1 + math.log(2)) + 0.0) / 2
    assert approx_kl([datum], [learner]) == pytest.approx(expected)
    assert approx_kl([datum], [learner]) == pytest.approx(0.0966, abs=1e-4)
    # No model token: no figure.
    off = replace(datum, mask=(False,) * 3, advantages=(0.0,) * 3)
    assert approx_kl([off], [learner]) is None
    assert approx_kl([], []) is None
    # One list per datum, one logprob per target token.
    with pytest.raises(
        ValueError, match=r"^one list of learner logprobs per datum \(got 0 for 1\)"
    ):
        approx_kl([datum], [])
    with pytest.raises(ValueError, match=r"^one learner logprob per target token \(got 2 for 3\)"):
        approx_kl([datum], [learner[:2]])
    # A ratio past e^700 counts as e^700: still a number.
    far = approx_kl([datum], [[0.0, 0.0, 800.0]])
    assert far is not None
    assert math.isfinite(far)
    assert far == pytest.approx((math.expm1(LOG_RATIO_CAP) - LOG_RATIO_CAP) / 2)
    # Entropy: tokens sampled at log 0.5 and log 0.25: (0.693 + 1.386) / 2 = 1.040 nats.
    assert sampler_entropy([math.log(0.5), math.log(0.25)]) == pytest.approx(1.0397, abs=1e-4)
    assert sampler_entropy([0.0, 0.0]) == 0.0  # greedy: a point mass
    assert sampler_entropy([]) is None


def test_minibatch_results_carry_the_learners_logprobs_in_order() -> None:
    first = TrainResult(1.0, {"loss:sum": 1.0}, ((-0.1, -0.2),))
    second = TrainResult(2.0, {"loss:sum": 2.0}, ((-0.3,), (-0.4, -0.5)))
    assert combined([first, second], [2, 3]).learner_logprobs_D == (
        (-0.1, -0.2), (-0.3,), (-0.4, -0.5)
    )  # fmt: skip
    assert combined([first, TrainResult(2.0, {"loss:sum": 2.0})], [2, 3]).learner_logprobs_D is None
