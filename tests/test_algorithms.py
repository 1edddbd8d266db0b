"""The algorithm choices end to end: each loss as the fake computes it and as the SDK gets it,
substeps, reward scaling, and how the command line takes them."""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast, get_args

import pytest
import tinker
from tinker import types

from cli_process import run_main
from doubles.fake_mint import FakeMintServer, FakeTrainingClient
from mathrl.backend import Backend, Datum, SampleParams, TrainResult
from mathrl.checkpoints import run_fingerprint
from mathrl.cli.train import tempered_ratio_note
from mathrl.config import ConfigError, TrainConfig
from mathrl.grpo import build_datum
from mathrl.loop import run_grpo
from mathrl.losses import (
    CLIP_HIGH,
    IMPORTANCE_SAMPLING,
    LOSSES,
    Loss,
    LossName,
    LossSpec,
    TokenLoss,
    token_loss,
)
from mathrl.report import TemperedRatio
from mathrl.resolved import as_task
from mathrl.rollout import run_problems
from mathrl.service.mint_backend import MintBackend, to_mint_datum
from mathrl.service.recovery import RetryingBackend
from mathrl.service.retry import RetryPolicy
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl_fakes import FakeBackend, FakeModel, RecordingBackend, references_for
from observing import observed_run

SOME_LOSSES = [
    IMPORTANCE_SAMPLING,
    Loss("ppo", clip_low=0.9, clip_high=1.1),
    Loss("cispo", clip_low=0.5, clip_high=1.5),
    Loss("dro", dro_beta=0.2),
]


def datums_of(backend: FakeBackend, n: int = 6) -> list[Datum]:
    """Sampled completions of a few addition prompts, with advantages of both signs."""
    task = MathAdapter()
    problems = task.build_dataset(0, 1, n)

    async def go() -> list[Datum]:
        path = await (await backend.submit_save_for_sampler("start"))
        sampler = await backend.create_sampler(path)
        out = []
        for i, problem in enumerate(problems):
            prompt_T = backend.tokenizer.encode(task.make_prompt(problem))
            [c] = await sampler.sample(prompt_T, 1, SampleParams(8, 1.0, ("\n",), i))
            datum = build_datum(prompt_T, c.tokens, c.logprobs, (-1.0) ** i * (1 + i / 4))
            assert datum is not None
            out.append(datum)
        return out

    return asyncio.run(go())


def fake_sdk(
    folder: Path, problems: Sequence[AdditionProblem]
) -> tuple[FakeMintServer, FakeTrainingClient]:
    """A fake of the MinT SDK that knows `problems`, and a LoRA training client on it."""
    server = FakeMintServer(references_for(MathAdapter(), problems), checkpoint_dir=folder)
    return server, server.connect().create_lora_training_client("fake/base")


def mint_on(training: FakeTrainingClient) -> MintBackend:
    return MintBackend(training, training.get_tokenizer())


def fake(tmp_path: Path) -> FakeBackend:
    task = MathAdapter()
    references = references_for(task, task.build_dataset(0, 1, 6))
    return FakeBackend(FakeModel(references), task_name="addition", checkpoint_dir=tmp_path)


def written_out(loss: Loss, lp: float, q: float, a: float) -> tuple[float, bool]:
    """One token's loss under `loss`, and whether a clip bound it: `mathrl.losses`' table,
    restated here apart from its code (`r = exp(lp - q)`), so a slip there shows here."""
    settings, r = dict(loss.settings), math.exp(lp - q)
    if loss.name == "importance_sampling":
        return -r * a, False
    if loss.name == "dro":
        return -(lp * a - settings["dro_beta"] * (lp - q) ** 2 / 2), False
    if loss.name == CAPPED:  # the toy loss a test adds to the table (below)
        capped = capped_importance_sampling(lp, q, a, **settings)
        return capped.loss, capped.clipped
    c = min(max(r, settings["clip_low"]), settings["clip_high"])
    if loss.name == "ppo":  # the clipped side counts where it is strictly the lower
        return -min(r * a, c * a), c * a < r * a
    assert loss.name == "cispo"
    return -c * lp * a, c != r


def summed(
    loss: Loss, datums: Sequence[Datum], learner_D: Sequence[Sequence[float]]
) -> tuple[float, float]:
    """`written_out` summed over every position of every datum, as the service sums a loss,
    and the share of the model's tokens (by the masks) a clip bound."""
    total, clipped, scored = 0.0, 0, 0
    for datum, lp_T in zip(datums, learner_D, strict=True):
        for lp, q, a, mine in zip(lp_T, datum.logprobs, datum.advantages, datum.mask,
                                  strict=True):  # fmt: skip
            term, bound = written_out(loss, lp, q, a)
            total += term
            clipped += bound and mine
            scored += mine
    return total, clipped / scored


@pytest.mark.parametrize("loss", SOME_LOSSES, ids=lambda loss: loss.name)
def test_the_fake_trains_with_each_loss_as_its_formula_says(tmp_path: Path, loss: Loss) -> None:
    trains_as_the_formula_says(tmp_path, loss)


def trains_as_the_formula_says(tmp_path: Path, loss: Loss) -> None:
    """The fake's loss and clip fraction for `loss` are its formula's (`written_out`), summed
    over every token, at the learner's logprobs before the step."""
    backend = fake(tmp_path)
    datums = datums_of(backend)
    model = backend.model
    assert isinstance(model, FakeModel)
    # Change the weights first, so the ratios move away from 1 and the clips matter.
    asyncio.run(_train(backend, datums, 0.5))
    learner_D = [model.logprobs(datum) for datum in datums]
    expected, clipped = summed(loss, datums, learner_D)
    result = asyncio.run(_train(backend, datums, 1e-3, loss))
    assert result.loss == pytest.approx(expected, rel=1e-9)
    assert result.metrics["loss:sum"] == result.loss
    assert result.learner_logprobs_D == tuple(map(tuple, learner_D))
    if loss.clips:
        assert result.metrics["clipped:frac"] == pytest.approx(clipped)
        assert 0 < clipped < 1  # these ratios do reach past the clips
    else:
        assert "clipped:frac" not in result.metrics


async def _train(
    backend: Backend, datums: list[Datum], lr: float, loss: Loss = IMPORTANCE_SAMPLING
) -> TrainResult:
    return await (await backend.submit_train_step(datums, lr, loss))


@pytest.mark.parametrize("loss", SOME_LOSSES, ids=lambda loss: loss.name)
def test_the_mint_backend_sends_the_loss_and_its_config_and_gets_its_formulas_loss(
    tmp_path: Path, loss: Loss
) -> None:
    sends_its_config_and_gets_the_formulas_loss(tmp_path, loss)


def sends_its_config_and_gets_the_formulas_loss(tmp_path: Path, loss: Loss) -> None:
    """Over the fake SDK, the mint backend sends `loss` with its config, and gets the loss its
    formula gives (`written_out`) at the learner's logprobs the service returns, with the
    clip fraction it works out from them."""
    server, training = fake_sdk(tmp_path / "m", MathAdapter().build_dataset(0, 1, 6))
    mint = mint_on(training)
    datums = datums_of(fake(tmp_path / "f"))
    # Move off the sampling weights first, so ratios leave 1 and the clips bind.
    asyncio.run(_train(mint, datums, 0.5))
    got = asyncio.run(_train(mint, datums, 1e-3, loss))
    assert server.loss_fn_configs[-1] == (loss.name, loss.config())
    assert got.learner_logprobs_D is not None
    expected, clipped = summed(loss, datums, got.learner_logprobs_D)
    # The SDK sends logprobs and advantages as float32: the same loss to about 1e-6.
    assert got.loss == pytest.approx(expected, rel=1e-5)
    if loss.clips:  # the client works it out from the learner's logprobs the service returns
        assert got.metrics["clipped:frac"] == pytest.approx(clipped)
        assert 0 < clipped < 1
    else:
        assert "clipped:frac" not in got.metrics


def test_the_fake_sdk_refuses_a_config_the_loss_does_not_take(tmp_path: Path) -> None:
    _, training = fake_sdk(tmp_path, MathAdapter().build_dataset(0, 1, 6))
    data = [to_mint_datum(d) for d in datums_of(fake(tmp_path / "f"))]
    with pytest.raises(tinker.RequestFailedError, match="loss_fn_config for ppo takes"):
        training.forward_backward(data, "ppo", {"beta": 0.1}).result()


def test_every_loss_of_the_table_is_one_the_sdk_knows() -> None:
    assert set(LOSSES) <= set(get_args(types.LossFnType))


# --- a loss added to the table alone ----------------------------------------------------------

CAPPED = cast(LossName, "capped")  # a name the type checker cannot know: added at run time


def capped_importance_sampling(lp: float, q: float, a: float, *, clip_high: float) -> TokenLoss:
    """-min(r, clip_high) A: importance sampling with the ratio capped, no gradient past it."""
    r = math.exp(lp - q)
    if r > clip_high:
        return TokenLoss(-clip_high * a, 0.0, clipped=True)
    return TokenLoss(-r * a, -r * a)


@pytest.fixture
def capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A toy loss in `mathrl.losses.LOSSES`, which reuses the clip_high setting; nothing else
    is changed."""
    spec = LossSpec(
        capped_importance_sampling, "-min(r, clip_high) A", {CLIP_HIGH: 2.0}, clips=True
    )
    monkeypatch.setitem(LOSSES, CAPPED, spec)


@pytest.mark.usefixtures("capped")
def test_a_loss_added_to_the_table_is_checked_configured_helped_and_trained(
    tmp_path: Path,
) -> None:
    # The config takes it, with the setting it takes, and refuses the ones it does not.
    config = TrainConfig(loss=CAPPED, clip_high=3.0)
    assert config.loss_fn == Loss(CAPPED, clip_high=3.0)
    assert config.loss_fn.config() == {"clip_high_threshold": 3.0}
    assert TrainConfig(loss=CAPPED).loss_fn.config() == {"clip_high_threshold": 2.0}
    with pytest.raises(ConfigError, match=r"^TrainConfig\.clip_low applies to the ppo or cispo "
                       r"loss only \(got TrainConfig\.loss capped\)$"):  # fmt: skip
        TrainConfig(loss=CAPPED, clip_low=0.5)
    with pytest.raises(ConfigError, match=r"^TrainConfig\.clip_high applies to the ppo, cispo or "
                       r"capped loss only \(got TrainConfig\.loss dro\)$"):  # fmt: skip
        TrainConfig(loss="dro", clip_high=1.5)
    refusals = {
        ("--loss", "capped", "--dro-beta", "0.1"):
            "--dro-beta applies to the dro loss only (got --loss capped)",
        ("--loss", "capped", "--clip-high", "0.5"):
            "--clip-high must be a number >= 1 and <= 100 (got '0.5')",
        ("--loss", "reinforce"):
            "--loss must be one of importance_sampling, ppo, cispo, dro, capped (got 'reinforce')",
    }  # fmt: skip
    for flags, message in refusals.items():
        done = run_main(tmp_path, "--backend", "fake", *flags)
        assert (done.returncode, done.stderr) == (2, f"mathrl: error: {message}\n")

    # --help lists it, and its default with the others'.
    shown = run_main(tmp_path, "--help").stdout
    words = " ".join(shown.split())
    assert "the policy-gradient loss: importance_sampling, ppo, cispo, dro or capped" in words
    assert "--clip-high FLOAT ppo, cispo and capped: the upper bound of the importance" in words
    assert "--clip-low FLOAT ppo and cispo: the lower bound of the importance ratio" in words
    assert re.search(r"MINT_RL_CLIP_HIGH\s+--clip-high\s+default the loss's: 1\.2 for ppo, "
                     r"4 for cispo, 2 for capped\n", shown)  # fmt: skip
    assert re.search(r"MINT_RL_CLIP_LOW\s+--clip-low\s+default the loss's: 0\.8 for ppo, "
                     r"0 for cispo\n", shown)  # fmt: skip

    # The fake trains with it, as its formula says; the fake SDK takes its config and nothing
    # else, and gives the same loss.
    trains_as_the_formula_says(tmp_path / "fake", Loss(CAPPED, clip_high=1.1))
    sends_its_config_and_gets_the_formulas_loss(tmp_path / "sdk", Loss(CAPPED, clip_high=1.1))
    _, training = fake_sdk(tmp_path / "refused", MathAdapter().build_dataset(0, 1, 6))
    data = [to_mint_datum(d) for d in datums_of(fake(tmp_path / "refused-fake"))]
    with pytest.raises(
        tinker.RequestFailedError,
        match=r"loss_fn_config for capped takes \['clip_high_threshold'\] \(got \['beta'\]\)",
    ):
        training.forward_backward(data, CAPPED, {"beta": 0.1}).result()

    # A whole run from the command line, the loss from its variable, its setting from a flag.
    done = run_main(tmp_path, "--backend", "fake", "--steps", "3", "--substeps", "2",
                    "--clip-high", "1.1", "--log-dir", "run", MINT_RL_LOSS="capped")  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = json.loads((tmp_path / "run" / "config.json").read_text())["settings"]
    assert (settings["loss"], settings["clip_high"]) == ("capped", 1.1)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert all("clipped:frac" in r["backend_metrics"] for r in records if r["loss"] is not None)


@pytest.mark.parametrize("substeps", [1, 3])
def test_substeps_split_the_step_into_that_many_updates(tmp_path: Path, substeps: int) -> None:
    task = MathAdapter()
    config = TrainConfig(steps=2, batch=4, group=4, substeps=substeps, loss="ppo")
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=tmp_path)
    result = run_grpo(backend, task, config)
    training = ("forward_backward", "optim_step", "save_weights_for_sampler")
    kinds = [k for k in backend.log.kinds() if k in training]
    trained = [m for m in result.steps if m.datums]
    assert trained
    # Each step: K x (forward_backward, optim_step), then the save of the new weights.
    expected = ["save_weights_for_sampler"]  # step 0's
    for m in trained:
        expected += ["forward_backward", "optim_step"] * min(substeps, m.datums)
        expected.append("save_weights_for_sampler")
    assert kinds == expected
    assert all(m.loss is not None and math.isfinite(m.loss) for m in trained)


def test_the_default_algorithm_keeps_the_checkpoint_names_of_before() -> None:
    task = as_task(MathAdapter())
    base = run_fingerprint(task, TrainConfig())
    assert base == "5528d96d"  # the addition task's default name before these choices existed
    assert (
        run_fingerprint(
            task, TrainConfig(loss="importance_sampling", scale_rewards="none", substeps=1)
        )
        == base
    )
    # The loss counts as the service gets it: explicit defaults are the defaults.
    for name, spec in LOSSES.items():
        defaults: dict[str, Any] = {p.field: d for p, d in spec.defaults.items()}
        explicit = TrainConfig(loss=name, **defaults)
        assert run_fingerprint(task, explicit) == run_fingerprint(task, TrainConfig(loss=name))
    changed = (
        TrainConfig(loss="ppo"),
        TrainConfig(loss="ppo", clip_low=0.9),
        TrainConfig(loss="cispo"),
        TrainConfig(loss="dro"),
        TrainConfig(loss="dro", dro_beta=0.1),
        TrainConfig(scale_rewards="group"),
        TrainConfig(substeps=2),
        TrainConfig(fill_batch=True),
        TrainConfig(kl_coef=0.1),
    )
    names = [run_fingerprint(task, c) for c in changed]
    assert len({base, *names}) == 1 + len(names)  # each trains differently: each its own name


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--clip-low", "0.9"),
            "--clip-low applies to the ppo or cispo loss only (got --loss importance_sampling)",
        ),
        (
            ("--loss", "dro", "--clip-high", "2"),
            "--clip-high applies to the ppo or cispo loss only (got --loss dro)",
        ),
        (
            ("--dro-beta", "0.1", "--loss", "ppo"),
            "--dro-beta applies to the dro loss only (got --loss ppo)",
        ),
        (
            ("--loss", "reinforce"),
            "--loss must be one of importance_sampling, ppo, cispo, dro (got 'reinforce')",
        ),
        (
            ("--clip-low", "1.5", "--loss", "ppo"),
            "--clip-low must be a number >= 0 and <= 1 (got '1.5')",
        ),
        (
            ("--scale-rewards", "std"),
            "--scale-rewards must be one of none, group, batch (got 'std')",
        ),
        (("--substeps", "0"), "--substeps must be an integer from 1 to 64 (got '0')"),
    ],
)
def test_algorithm_settings_that_make_no_sense_are_one_line(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "1", *flags)
    assert done.returncode == 2
    assert done.stderr == f"mathrl: error: {message}\n"


def test_a_run_with_every_choice_records_them(tmp_path: Path) -> None:
    done = run_main(
        tmp_path, "--backend", "fake", "--steps", "6", "--log-dir", "run", "--loss", "cispo",
        "--clip-high", "2", "--scale-rewards", "group", "--substeps", "2",
        MINT_RL_LOSS="ppo",  # the flag wins over the variable
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = json.loads((tmp_path / "run" / "config.json").read_text())["settings"]
    assert (
        settings["loss"],
        settings["clip_high"],
        settings["scale_rewards"],
        settings["substeps"],
    ) == ("cispo", 2.0, "group", 2)
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    assert all("clipped:frac" in r["backend_metrics"] for r in records if r["loss"] is not None)
    assert all(r["mean_abs_advantage"] > 0 for r in records if r["datums"])
    refused = run_main(tmp_path, "--resume", "run", "--loss", "ppo")
    assert refused.returncode == 2
    assert "--loss ppo cannot be given with --resume: run/config.json records --loss cispo" in (
        refused.stderr
    )


def test_a_config_built_by_hand_is_checked_alike() -> None:
    with pytest.raises(ConfigError, match=r"TrainConfig\.dro_beta applies to the dro loss only"):
        TrainConfig(dro_beta=0.1)


@pytest.mark.parametrize("off_policy", [0, 1])
def test_fill_batch_is_deterministic_and_works_off_policy(tmp_path: Path, off_policy: int) -> None:
    task = MathAdapter()
    config = TrainConfig(
        steps=5, batch=6, group=4, fill_batch=True, max_steps_off_policy=off_policy
    )

    def trained(folder: str) -> tuple[list[list[Datum]], list[int]]:
        backend = RecordingBackend(
            FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=tmp_path / folder)
        )
        result = run_grpo(backend, task, config)
        return backend.trained, [m.groups for m in result.steps]

    first, drawn = trained("a")
    assert trained("b") == (first, drawn)  # the same problems, samples and datums
    assert all(config.batch <= n <= 4 * config.batch for n in drawn)
    assert max(drawn) > config.batch  # some steps did draw more


def test_on_the_fake_dro_leaves_the_prompt_out_of_its_loss(tmp_path: Path) -> None:
    task = MathAdapter()
    config = TrainConfig(steps=1, batch=4, group=4, loss="dro")
    backend = FakeBackend.for_run(task, run_problems(task, config), checkpoint_dir=tmp_path)
    recorder = RecordingBackend(backend)
    before = list(backend.theta)
    [step] = run_grpo(recorder, task, config).steps
    [datums] = recorder.trained
    # One more round trip: the trained weights' logprobs of each datum's tokens.
    assert backend.log.count("compute_logprobs") == len(datums) == step.datums
    on_mask = off_mask = 0.0
    for datum in datums:
        assert isinstance(backend.model, FakeModel)
        lps = backend.model.logprobs(datum, before)  # as forward_backward saw them
        for lp, q, a, mine in zip(lps, datum.logprobs, datum.advantages, datum.mask,
                                  strict=True):  # fmt: skip
            if mine:
                on_mask += token_loss(config.loss_fn, lp, q, a).loss
            else:
                assert q == lp  # anchored: the policy's own logprob, exactly, on the fake
                off_mask += token_loss(config.loss_fn, lp, q, a).loss
    # Off the mask DRO's -(lp * 0 - beta * 0^2 / 2) is 0: the loss is the model tokens' alone.
    assert off_mask == 0.0
    assert step.loss == pytest.approx(on_mask, rel=1e-12)


@pytest.mark.parametrize(
    ("loss", "temperature", "noted"),
    [("ppo", 0.7, True), ("cispo", 1.3, True), ("ppo", 1.0, False),
     ("importance_sampling", 0.7, False)],
)  # fmt: skip
def test_a_clipped_loss_off_temperature_1_is_noted_once_with_step_1s_clip(
    tmp_path: Path, loss: LossName, temperature: float, noted: bool
) -> None:
    task = MathAdapter()
    config = TrainConfig(steps=2, batch=4, group=4, loss=loss, temperature=temperature)
    seen = observed_run(task, config, tmp_path)
    first = seen.steps[0]
    assert first.datums  # step 1 trained, so it is the one measured
    if noted:
        clipped = first.backend_metrics["clipped:frac"]
        assert seen.notes == [TemperedRatio(1, config.loss_fn, temperature, clipped)]
        # Step 1 is on-policy: only the temperature moved these ratios past PPO's 0.8 and 1.2.
        assert clipped > 0 or loss == "cispo"  # cispo's default bounds, 0 and 4, are wider
    else:
        assert seen.notes == []


def test_the_note_on_a_tempered_ratio_in_the_command_lines_words() -> None:
    # PPO at 0.7 with its defaults, 9 of 1,000 model tokens clipped at step 1: 0.9%.
    note = TemperedRatio(1, Loss("ppo"), 0.7, 0.009)
    assert tempered_ratio_note(note) == (
        "note: with --loss ppo (--clip-low 0.8, --clip-high 1.2) at --temperature 0.7, the "
        "importance ratio is not 1 even on-policy (the sampler's logprobs are the tempered "
        "distribution's, the learner's are at temperature 1), so the clip acts on tokens the "
        "policy itself sampled: at step 1 it bound 0.9% of the model's tokens. Sample at "
        "--temperature 1 (MINT_RL_TEMPERATURE=1) for a ratio of 1 on-policy."
    )
    unsaid = tempered_ratio_note(replace(note, step=2, clipped=None))
    assert "the backend did not say how many it bound at step 2." in unsaid


def test_a_run_notes_a_tempered_ratio_on_stderr_once(tmp_path: Path) -> None:
    done = run_main(tmp_path, "--backend", "fake", "--steps", "3", "--batch", "4",
                    "--loss", "cispo", "--temperature", "0.7")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("mathrl: note: with --loss cispo (--clip-low 0, --clip-high 4) at "
                             "--temperature 0.7, the importance ratio is not 1") == 1  # fmt: skip
    assert "note:" not in done.stdout


def test_the_kl_penalty_asks_the_step_0_sampler_over_the_sdk_too(tmp_path: Path) -> None:
    task = MathAdapter()
    config = TrainConfig(steps=3, batch=4, group=4, kl_coef=0.1)
    server, training = fake_sdk(
        tmp_path, [p for s in (1, 2, 3) for p in task.build_dataset(0, s, 4)]
    )
    recorder = RecordingBackend(mint_on(training))
    result = run_grpo(recorder, task, config)
    trained = [m for m in result.steps if m.datums]
    assert len(server.logprob_requests) == sum(m.datums for m in trained)
    step_0 = recorder.samples[0].path  # step 1 samples the step-0 weights
    assert {path for path, _ in recorder.scored} == {step_0}  # the base, every step
    assert all(m.kl is not None for m in trained)
    assert trained[0].kl == pytest.approx(0.0, abs=1e-6)  # step 1 samples the base weights


def test_a_run_with_a_kl_penalty_resumes_against_the_same_base(tmp_path: Path) -> None:
    first = run_main(tmp_path, "--backend", "fake", "--steps", "3", "--log-dir", "run",
                     "--kl-coef", "0.1", "--eval-every", "0")  # fmt: skip
    assert first.returncode == 0, first.stderr
    resumed = run_main(tmp_path, "--resume", "run", "--steps", "5")
    assert resumed.returncode == 0, resumed.stderr
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert all(r["kl"] is not None for r in records if r["datums"])
    assert records[0]["kl"] == pytest.approx(0.0, abs=1e-9)  # step 1 samples the base itself
    # Then the policy moves away from it, after the resume too: against the same base (a
    # resumed run that took its own weights as the base would measure about 0 there).
    assert all(abs(r["kl"]) > 1e-6 for r in records[1:] if r["datums"])  # k1: either sign


def test_the_choices_survive_retries_exactly(tmp_path: Path) -> None:
    # Faults on a fifth of the calls: a retried training call restores the last state and
    # replays the steps since, with their minibatches and loss; the run ends the same.
    task = MathAdapter()
    config = TrainConfig(steps=4, batch=6, group=4, loss="ppo", substeps=3, kl_coef=0.1,
                         fill_batch=True, save_every=2)  # fmt: skip

    def finish(fault_rate: float, folder: str) -> tuple[list[float], list[float]]:
        inner = FakeBackend.for_run(
            task, run_problems(task, config), checkpoint_dir=tmp_path / folder,
            fault_rate=fault_rate, seed=3,
        )  # fmt: skip
        backend = RetryingBackend(inner, RetryPolicy(retries=50, delay=0.0, window=600.0))
        result = run_grpo(backend, task, config)
        return [m.loss or 0.0 for m in result.steps], list(inner.theta)

    assert finish(0.2, "faulty") == finish(0.0, "clean")


def test_every_choice_at_once_over_the_sdk_trains_as_on_the_fake(tmp_path: Path) -> None:
    # The mint backend over the fake SDK, and the fake backend, from the same references and
    # seed: the same datums step by step, whatever the algorithm asks of them.
    task = MathAdapter()
    config = TrainConfig(steps=3, batch=4, group=4, loss="ppo", clip_high=1.1, substeps=2,
                         scale_rewards="group", fill_batch=True, kl_coef=0.05)  # fmt: skip
    problems = [p for s in (1, 2, 3) for p in task.build_dataset(0, s, 16)]
    server, training = fake_sdk(tmp_path / "m", problems)
    over_sdk = RecordingBackend(mint_on(training))
    on_fake = RecordingBackend(
        FakeBackend(FakeModel(references_for(task, problems), "uniform"), task_name="addition",
                    checkpoint_dir=tmp_path / "f")
    )  # fmt: skip
    sdk_steps = run_grpo(over_sdk, task, config).steps
    fake_steps = run_grpo(on_fake, task, config).steps
    assert [len(d) for d in over_sdk.trained] == [len(d) for d in on_fake.trained]
    assert [m.groups for m in sdk_steps] == [m.groups for m in fake_steps]
    assert server.loss_fn_configs[0] == (
        "ppo",
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.1},
    )
    assert all(m.kl is not None for m in sdk_steps if m.datums)
