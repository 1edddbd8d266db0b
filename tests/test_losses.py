"""The policy-gradient losses: the table, then token by token, properties and worked examples
with arithmetic."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mathrl.losses
from mathrl.backend import Datum
from mathrl.grpo import anchored, build_datum
from mathrl.losses import (
    DEFAULT_LOSS,
    IMPORTANCE_SAMPLING,
    LOSSES,
    PARAMETERS,
    Loss,
    LossName,
    Parameter,
    TokenLoss,
    losses_taking,
    token_loss,
)
from mathrl.text import listed
from strategies import (
    advantages,
    clip_pairs,
    episode_datums,
    logistic_tables,
    logprobs,
    loss_names,
    losses,
)

PPO, CISPO, DRO = Loss("ppo"), Loss("cispo"), Loss("dro")


# --- the table -------------------------------------------------------------------------------


def columns(rows: Sequence[Sequence[str]]) -> str:
    """Rows as the module docstring lays a table out: indented 4, columns 2 apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    cells = [(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(("    " + "  ".join(row)).rstrip() for row in cells)


def test_the_docstring_tables_are_the_table() -> None:
    formulas = [("loss", "per token", "settings (default)")] + [
        (name, spec.formula, ", ".join(f"{p.field} {d:g}" for p, d in spec.defaults.items()) or "-")
        for name, spec in LOSSES.items()
    ]
    settings = [("setting", "loss_fn_config key", "range", "meaning")] + [
        (p.field, p.key, f"{p.low:g} to {p.high:g}", p.meaning) for p in PARAMETERS
    ]
    assert columns(formulas) in (mathrl.losses.__doc__ or "")
    assert columns(settings) in (mathrl.losses.__doc__ or "")


def test_the_type_checker_knows_the_losses_of_the_table() -> None:
    assert tuple(LOSSES) == get_args(LossName)
    assert DEFAULT_LOSS in LOSSES
    assert Loss() == IMPORTANCE_SAMPLING
    assert IMPORTANCE_SAMPLING.name == DEFAULT_LOSS


def test_every_loss_takes_its_defaults_and_its_token_function_takes_its_settings() -> None:
    for name, spec in LOSSES.items():
        for parameter, default in spec.defaults.items():
            assert parameter.allows(default), (name, parameter.field)
        # (lp, q, A) = (ln 0.5, ln 0.25, 1): r = 2; every loss computes something finite.
        term = token_loss(Loss(name), math.log(0.5), math.log(0.25), 1.0)
        assert math.isfinite(term.loss), name
        assert math.isfinite(term.gradient), name
    assert set(PARAMETERS) == {p for spec in LOSSES.values() for p in spec.defaults}


@given(loss_names, st.sampled_from(PARAMETERS), st.floats(allow_nan=True))
def test_a_setting_is_taken_exactly_where_the_table_says_and_within_its_range(
    name: LossName, parameter: Parameter, value: float
) -> None:
    takers = losses_taking(parameter)
    if name not in takers:
        refusal = (
            f"{parameter.field} applies to the {listed(takers, 'or')} loss only "
            f"(the loss is {name})"
        )
    elif not parameter.allows(value):
        refusal = (
            f"{parameter.field} must be a number from {parameter.low:g} to {parameter.high:g} "
            f"(got {value!r})"
        )
    else:
        config = Loss(name, **{parameter.field: value}).config()
        # The setting given, and every other setting of the loss at its default, spelled out.
        assert config == {
            p.key: value if p == parameter else d for p, d in LOSSES[name].defaults.items()
        }
        return
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}$"):
        Loss(name, **{parameter.field: value})


@given(losses)
def test_the_config_spells_out_every_setting_of_the_loss_and_no_other(loss: Loss) -> None:
    config = loss.config()
    keys = [p.key for p in LOSSES[loss.name].defaults]
    assert (list(config) if config is not None else []) == keys
    assert Loss(loss.name, **dict(loss.settings)) == loss  # the defaults, given, change nothing


# --- token by token: properties --------------------------------------------------------------


def numeric_gradient(loss: Loss, lp: float, q: float, a: float, h: float = 1e-6) -> float:
    return (token_loss(loss, lp + h, q, a).loss - token_loss(loss, lp - h, q, a).loss) / (2 * h)


@given(losses, logprobs, logprobs, advantages)
def test_a_loss_that_does_not_clip_never_reports_a_clipped_token(
    loss: Loss, lp: float, q: float, a: float
) -> None:
    assert loss.clips or not token_loss(loss, lp, q, a).clipped


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
    low, high = clips
    loss = Loss("ppo", clip_low=low, clip_high=high)
    r = math.exp(lp - q)
    term = token_loss(loss, lp, q, a)
    pushed_past = (r > high and a > 0) or (r < low and a < 0)
    assert term.clipped == pushed_past
    if pushed_past:  # the ratio already moved the way the advantage pushes: no more of it
        assert term.gradient == 0.0
        assert term.loss == pytest.approx(-min(max(r, low), high) * a)
    else:  # the unclipped objective: exactly importance sampling's
        assert term == token_loss(IMPORTANCE_SAMPLING, lp, q, a)


@given(clip_pairs, logprobs, logprobs, advantages)
def test_cispo_weighs_the_gradient_by_the_clipped_ratio_and_passes_none_through_it(
    clips: tuple[float, float], lp: float, q: float, a: float
) -> None:
    low, high = clips
    loss = Loss("cispo", clip_low=low, clip_high=high)
    c = min(max(math.exp(lp - q), low), high)
    term = token_loss(loss, lp, q, a)
    assert term.gradient == pytest.approx(-c * a)  # sg(c): the weight is a constant
    assert term.loss == pytest.approx(-c * lp * a)
    assert term.clipped == (c != math.exp(lp - q))


@given(
    st.sampled_from([IMPORTANCE_SAMPLING, DRO, Loss("dro", dro_beta=1.0)]),
    logprobs,
    logprobs,
    advantages,
)
def test_the_gradient_is_the_derivative_of_the_loss_where_nothing_is_detached(
    loss: Loss, lp: float, q: float, a: float
) -> None:
    expected = numeric_gradient(loss, lp, q, a)
    assert token_loss(loss, lp, q, a).gradient == pytest.approx(expected, rel=1e-4, abs=1e-4)


@given(st.sampled_from([IMPORTANCE_SAMPLING, PPO, Loss("ppo", clip_low=0.5, clip_high=3.0)]),
       logprobs, logprobs,
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
def test_no_advantage_no_loss_unless_the_loss_acts_on_every_position(
    loss: Loss, lp: float, q: float
) -> None:
    # The fake skips the positions without an advantage for a loss that says it may.
    term = token_loss(loss, lp, q, 0.0)
    if not loss.every_position:
        assert (term.loss, term.gradient) == (0.0, 0.0)


@given(st.floats(0.0, 100.0), logprobs, logprobs)
def test_without_an_advantage_dro_pulls_lp_towards_q(beta: float, lp: float, q: float) -> None:
    term = token_loss(Loss("dro", dro_beta=beta), lp, q, 0.0)
    assert term.gradient == pytest.approx(beta * (lp - q))  # its penalty alone
    assert term.loss == pytest.approx(beta * (lp - q) ** 2 / 2)


def test_the_config_the_service_gets_spells_out_every_setting() -> None:
    assert IMPORTANCE_SAMPLING.config() is None
    assert PPO.config() == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    assert CISPO.config() == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    assert Loss("ppo", clip_high=1.5).config() == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.5,
    }
    assert DRO.config() == {"beta": 0.05}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "reinforce"}, "the loss must be one of importance_sampling, ppo, cispo, dro "
                                "(got 'reinforce')"),
        ({"name": "importance_sampling", "clip_low": 0.5},
         "clip_low applies to the ppo or cispo loss only (the loss is importance_sampling)"),
        ({"name": "ppo", "dro_beta": 0.1},
         "dro_beta applies to the dro loss only (the loss is ppo)"),
        ({"name": "ppo", "beta": 0.1},
         "beta is not a setting of any loss (they are clip_low, clip_high, dro_beta)"),
        ({"name": "ppo", "clip_low": 1.1}, "clip_low must be a number from 0 to 1 (got 1.1)"),
        ({"name": "cispo", "clip_high": 0.9},
         "clip_high must be a number from 1 to 100 (got 0.9)"),
        ({"name": "cispo", "clip_high": math.inf},
         "clip_high must be a number from 1 to 100 (got inf)"),
        # A setting left unset (None) before one that is wrong: the wrong one is still seen.
        ({"name": "ppo", "clip_low": None, "clip_high": 500.0},
         "clip_high must be a number from 1 to 100 (got 500.0)"),
    ],
)  # fmt: skip
def test_a_loss_that_makes_no_sense_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Loss(**kwargs)  # type: ignore[arg-type]  # wrong on purpose


# --- token by token: worked examples ---------------------------------------------------------


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


# --- on a learnable model: no loss trains the prompt ------------------------------------------

VOCAB = 4
"""The learnable model's classes: it reads a token id modulo VOCAB."""


def log_softmax(row: Sequence[float]) -> list[float]:
    top = max(row)
    log_total = top + math.log(math.fsum(math.exp(x - top) for x in row))
    return [x - log_total for x in row]


def own_logprobs(table: Sequence[Sequence[float]], datum: Datum) -> list[float]:
    """The table's logprob of each target token: what the trained weights' sampler returns."""
    return [
        log_softmax(row)[token % VOCAB]
        for row, token in zip(table, datum.target_tokens, strict=True)
    ]


def table_gradient(loss: Loss, table: Sequence[Sequence[float]], datum: Datum) -> list[list[float]]:
    """d (the datum's loss, summed over every position, as the service sums it) / d logits.

    Position i's lp is log softmax(table[i])[target_i]: row i is a parameter of position i
    alone, so a row of a position off the mask is a parameter only the prompt (or the
    environment) uses. d lp / d logit_v = [v = target] - p_v.
    """
    gradient = []
    for row, token, q, a in zip(table, datum.target_tokens, datum.logprobs, datum.advantages,
                                strict=True):  # fmt: skip
        logp = log_softmax(row)
        g = token_loss(loss, logp[token % VOCAB], q, a).gradient
        gradient.append([g * ((v == token % VOCAB) - math.exp(logp[v])) for v in range(VOCAB)])
    return gradient


@given(losses, episode_datums(advantages), st.data())
def test_on_a_learnable_model_no_loss_puts_a_gradient_on_the_prompts_parameters(
    loss: Loss, datum: Datum, data: st.DataObject
) -> None:
    n = len(datum.target_tokens)
    table = data.draw(logistic_tables(n, VOCAB))
    # The sampler's q of the model's tokens: any plausible logprob (ratios stay finite).
    q_T = data.draw(st.lists(logprobs, min_size=n, max_size=n))
    sampled_T = tuple(q if mine else 0.0 for q, mine in zip(q_T, datum.mask, strict=True))
    datum = replace(datum, logprobs=sampled_T)
    # What the step trains on: with a loss that acts on every position (DRO), the datum
    # anchored off the mask at the trained weights' own logprobs.
    trained = anchored([datum], [own_logprobs(table, datum)])[0] if loss.every_position else datum
    for row, mine in zip(table_gradient(loss, table, trained), datum.mask, strict=True):
        if not mine:
            assert row == [0.0] * VOCAB  # exactly: lp - q is 0.0 there, and so is A
    if loss.every_position and dict(loss.settings).get("dro_beta", 0.0) > 0 and not all(datum.mask):
        # Not anchored (q = 0 off the mask, as the datum is built), DRO's penalty trains the
        # prompt: beta lp (onehot - p), and lp < 0 with finite logits.
        untrained = table_gradient(loss, table, datum)
        assert any(any(row) for row, mine in zip(untrained, datum.mask, strict=True) if not mine)


def test_worked_example_of_dro_on_a_learnable_model() -> None:
    # A table of zeros over 4 classes: every lp = ln(1/4) = -1.386294. Prompt [0, 1, 2],
    # completion [3] sampled on-policy (q = ln 1/4), advantage 1; DRO at beta 0.05.
    datum = build_datum([0, 1, 2], [3], [math.log(0.25)], 1.0)
    assert datum is not None
    table = [[0.0] * VOCAB for _ in datum.target_tokens]
    # As built, q = 0 on prompt positions 0 and 1: g = -A + beta (lp - q) = 0.05 * -1.386294
    # = -0.0693147; on row 0 (target 1), -0.0693147 * (1 - 1/4) = -0.0519860, and
    # -0.0693147 * (0 - 1/4) = +0.0173287 on the other classes.
    before = table_gradient(DRO, table, datum)
    assert before[0] == pytest.approx([0.0173287, -0.0519860, 0.0173287, 0.0173287], abs=1e-6)
    # Anchored, q = lp there: g = 0, and rows 0 and 1 get nothing.
    after = table_gradient(DRO, table, anchored([datum], [own_logprobs(table, datum)])[0])
    assert after[0] == after[1] == [0.0] * VOCAB
    # The completion's row 2 (target 3) is trained as before: g = -1 + 0.05 * 0 = -1, so
    # -1 * (1 - 1/4) = -0.75 on the target and +0.25 on the others.
    assert after[2] == before[2] == pytest.approx([0.25, 0.25, 0.25, -0.75])
    # Importance sampling never touched the prompt: A = 0 there gives -r * 0 = 0.
    assert table_gradient(IMPORTANCE_SAMPLING, table, datum)[:2] == [[0.0] * VOCAB] * 2
