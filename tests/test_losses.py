"""The policy-gradient losses, token by token: properties, and worked examples with arithmetic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mathrl.losses import (
    DEFAULT_CLIPS,
    IMPORTANCE_SAMPLING,
    LOSSES,
    Loss,
    TokenLoss,
    loss_named,
    token_loss,
)
from strategies import advantages, clip_pairs, logprobs, losses

PPO, CISPO, DRO = Loss("ppo"), Loss("cispo"), Loss("dro")


def numeric_gradient(loss: Loss, lp: float, q: float, a: float, h: float = 1e-6) -> float:
    return (token_loss(loss, lp + h, q, a).loss - token_loss(loss, lp - h, q, a).loss) / (2 * h)


# --- properties ------------------------------------------------------------------------------


@given(losses, logprobs, advantages)
def test_at_ratio_one_every_loss_has_the_importance_sampling_gradient(
    loss: Loss, lp: float, a: float
) -> None:
    # r = exp(lp - q) = 1: no loss clips, DRO's penalty is at its minimum; all give -A.
    assert token_loss(loss, lp, lp, a).gradient == pytest.approx(-a)
    assert not token_loss(loss, lp, lp, a).clipped


@given(clip_pairs, logprobs, logprobs, advantages)
def test_ppo_passes_no_gradient_on_its_clipped_side(
    clips: tuple[float, float], lp: float, q: float, a: float
) -> None:
    loss = Loss("ppo", *clips)
    r = math.exp(lp - q)
    term = token_loss(loss, lp, q, a)
    pushed_past = (r > loss.high and a > 0) or (r < loss.low and a < 0)
    assert term.clipped == pushed_past
    if pushed_past:  # the ratio already moved the way the advantage pushes: no more of it
        assert term.gradient == 0.0
        assert term.loss == pytest.approx(-min(max(r, loss.low), loss.high) * a)
    else:  # the unclipped objective: exactly importance sampling's
        assert term == token_loss(IMPORTANCE_SAMPLING, lp, q, a)


@given(clip_pairs, logprobs, logprobs, advantages)
def test_cispo_weighs_the_gradient_by_the_clipped_ratio_and_passes_none_through_it(
    clips: tuple[float, float], lp: float, q: float, a: float
) -> None:
    loss = Loss("cispo", *clips)
    c = min(max(math.exp(lp - q), loss.low), loss.high)
    term = token_loss(loss, lp, q, a)
    assert term.gradient == pytest.approx(-c * a)  # sg(c): the weight is a constant
    assert term.loss == pytest.approx(-c * lp * a)
    assert term.clipped == (c != math.exp(lp - q))


@given(
    st.sampled_from([IMPORTANCE_SAMPLING, DRO, Loss("dro", beta=1.0)]),
    logprobs,
    logprobs,
    advantages,
)
def test_the_gradient_is_the_derivative_of_the_loss_where_nothing_is_detached(
    loss: Loss, lp: float, q: float, a: float
) -> None:
    expected = numeric_gradient(loss, lp, q, a)
    assert token_loss(loss, lp, q, a).gradient == pytest.approx(expected, rel=1e-4, abs=1e-4)


@given(st.sampled_from([IMPORTANCE_SAMPLING, PPO, Loss("ppo", 0.5, 3.0)]), logprobs, logprobs,
       advantages, st.floats(0.01, 100.0))  # fmt: skip
def test_the_loss_is_linear_in_a_positive_scale_of_the_advantage(
    loss: Loss, lp: float, q: float, a: float, k: float
) -> None:
    # min(r kA, c kA) = k min(r A, c A) for k > 0: the clip picks the same side.
    scaled, plain = token_loss(loss, lp, q, k * a), token_loss(loss, lp, q, a)
    assert scaled.loss == pytest.approx(k * plain.loss, rel=1e-9, abs=1e-12)
    assert scaled.gradient == pytest.approx(k * plain.gradient, rel=1e-9, abs=1e-12)
    assert scaled.clipped == plain.clipped or a == 0


@given(losses, logprobs, logprobs)
def test_no_advantage_no_policy_gradient(loss: Loss, lp: float, q: float) -> None:
    term = token_loss(loss, lp, q, 0.0)
    if loss.name == "dro":  # only its penalty pulls lp back towards q
        assert term.gradient == pytest.approx(loss.dro_beta * (lp - q))
    else:
        assert term.gradient == 0.0
        assert term.loss == 0.0


def test_the_config_the_service_gets_spells_out_every_setting() -> None:
    assert IMPORTANCE_SAMPLING.config() is None
    assert PPO.config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    assert CISPO.config() == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    assert Loss("ppo", clip_high=1.5).config() == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.5,
    }
    assert DRO.config() == {"beta": 0.05}
    assert set(LOSSES) == {"importance_sampling", *DEFAULT_CLIPS, "dro"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "reinforce"}, "must be one of importance_sampling, ppo, cispo, dro"),
        ({"name": "importance_sampling", "clip_low": 0.5}, "apply to ppo and cispo only"),
        ({"name": "ppo", "beta": 0.1}, "applies to dro only"),
        ({"name": "ppo", "clip_low": 1.1}, "0 <= low <= 1 <= high"),
        ({"name": "cispo", "clip_high": 0.9}, "0 <= low <= 1 <= high"),
    ],
)
def test_a_loss_that_makes_no_sense_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Loss(**kwargs)  # type: ignore[arg-type]  # wrong on purpose


# --- worked examples -------------------------------------------------------------------------


def assert_token(term: TokenLoss, loss: float, gradient: float, clipped: bool) -> None:
    assert term.loss == pytest.approx(loss, abs=1e-6)
    assert term.gradient == pytest.approx(gradient, abs=1e-6)
    assert term.clipped == clipped


LP, Q = math.log(0.6), math.log(0.4)  # the learner gives the token 0.6, the sampler gave 0.4


def test_worked_example_importance_sampling() -> None:
    # r = 0.6 / 0.4 = 1.5; A = 2: loss = -r A = -3.0, and d loss / d lp = -r A = -3.0.
    assert_token(token_loss(IMPORTANCE_SAMPLING, LP, Q, 2.0), -3.0, -3.0, False)


def test_worked_example_ppo() -> None:
    # r = 1.5, clip(r, 0.8, 1.2) = 1.2.
    # A = +2: min(1.5 * 2, 1.2 * 2) = 2.4, the clipped side: loss -2.4, no gradient.
    assert_token(token_loss(PPO, LP, Q, 2.0), -2.4, 0.0, True)
    # A = -2: min(-3.0, -2.4) = -3.0, the unclipped side: loss 3.0, gradient -r A = 3.0.
    assert_token(token_loss(PPO, LP, Q, -2.0), 3.0, 3.0, False)


def test_worked_example_cispo() -> None:
    # Defaults clip to [0, 4]: c = 1.5. A = 2: loss = -c lp A = -1.5 * ln 0.6 * 2 = 1.53240,
    # gradient -c A = -3.0.
    assert_token(token_loss(CISPO, LP, Q, 2.0), 1.5324768712979722, -3.0, False)
    # With --clip-high 1.2: c = 1.2, gradient -1.2 * 2 = -2.4, and the ratio was clipped.
    assert token_loss(Loss("cispo", clip_high=1.2), LP, Q, 2.0).gradient == pytest.approx(-2.4)


def test_worked_example_dro() -> None:
    # beta = 0.05; lp - q = ln 1.5 = 0.405465. A = 2:
    # loss = -(lp A - beta (lp - q)^2 / 2) = -(-0.510826 * 2 - 0.025 * 0.164402) = 1.025762,
    # gradient = -A + beta (lp - q) = -2 + 0.020273 = -1.979727.
    assert_token(token_loss(DRO, LP, Q, 2.0), 1.0257622, -1.9797267, False)


def test_a_loss_is_named_as_the_service_names_it() -> None:
    assert [loss_named(name) for name in LOSSES] == list(LOSSES)
    with pytest.raises(ValueError, match="must be one of importance_sampling, ppo, cispo, dro"):
        loss_named("grpo")
