"""Problems that share a prompt: a hidden-secret game, checked and learned on the fake.

The game (`doubles.secret_game`) has one prompt for every problem; only the
problem holds the secret. The checker compares its problems, not its
prompts, and the fake learns it from what its contexts show.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from doubles.secret_game import ChatSecretGame, Game, PeekingGame, SecretGame
from mathrl.adapter import Response
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.rollout import run_problems
from mathrl.testing import check_adapter
from mathrl_fakes import FakeBackend
from mathrl_fakes.policy import ByteTokenizer
from observing import moves_toward_its_references

BYTES = ByteTokenizer()


@pytest.mark.parametrize("game", [SecretGame(), ChatSecretGame()])
def test_the_game_passes_check_adapter_with_no_warning(game: SecretGame) -> None:
    summary = check_adapter(game)
    identity = f"doubles.secret_game:{type(game).__name__}"
    assert re.fullmatch(rf"task '{game.name}' \({identity}\) passed \d+ checks", summary), summary


def test_a_short_game_moves_toward_its_references(tmp_path: Path) -> None:
    moves_toward_its_references(SecretGame(), tmp_path)


@pytest.mark.slow  # a 20-step learning run; the fast suite's representative is above
def test_the_game_learns_on_the_fake(tmp_path: Path) -> None:
    game = SecretGame()
    config = TrainConfig(steps=20, batch=8, group=4, eval_every=10, eval_problems=16)
    backend = FakeBackend.for_run(game, run_problems(game, config), checkpoint_dir=tmp_path)
    result = run_grpo(backend, game, config)
    assert sum(m.datums for m in result.steps) > 0
    first, *_, last = result.evaluations
    assert (first.step, last.step) == (0, 20)
    assert last.mean_reward >= first.mean_reward + 0.5, (first, last)


class SameGamesEveryStep(SecretGame):
    """Draws the same games whatever the seed and step."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[Game]:
        rng = random.Random("secret-game")
        return [Game(rng.randint(1, 16), str(i)) for i in range(size)]


class HeldoutGamesAreTraining(SecretGame):
    """Holds out the games of step 1."""

    def heldout_dataset(self, seed: int, size: int) -> list[Game]:
        return self.build_dataset(seed, 1, size)


class GlobalSecrets(SecretGame):
    """Draws its secrets from the global random state."""

    def build_dataset(self, seed: int, step: int, size: int) -> list[Game]:
        return [Game(random.randint(1, 16), f"{seed}/{step}/{i}") for i in range(size)]


class Opaque:
    """A secret kept where no fingerprint can see it."""

    __slots__ = ()


class OpaqueGames(SecretGame):
    def build_dataset(self, seed: int, step: int, size: int) -> list[Any]:
        return [Opaque() for _ in range(size)]

    def heldout_dataset(self, seed: int, size: int) -> list[Any]:
        return [Opaque() for _ in range(size)]

    def feedback(self, problem: Any, responses: Sequence[Response]) -> Any:
        return super().feedback(Game(5, ""), responses)

    def compute_reward(self, completion: Response, problem: Any) -> float:
        return super().compute_reward(completion, Game(5, ""))

    def reference_turn(self, problem: Any, responses: Sequence[Response]) -> str:
        return super().reference_turn(Game(5, ""), responses)


@pytest.mark.parametrize(
    ("game", "expected"),
    [
        (SameGamesEveryStep(), r"^build_dataset gave the same problems for \(seed=0, step=1\) "
                               r"and \(seed=1, step=1\): each seed and step draws its own"),
        (HeldoutGamesAreTraining(), r"^heldout_dataset\(seed=0, size=32\) shares 8 of 32 "
                                    r"problems with training steps 1-10 \(size 8\), e\.g\. "
                                    r"'I am thinking of a number from 1 to 16\. '"),
        (GlobalSecrets(), r"^build_dataset\(seed=0, step=1, size=8\) depends on or advances "
                          r"the global random state"),
        (OpaqueGames(), r"^a problem of build_dataset\(seed=0, step=1, size=8\) cannot be told "
                        r"apart from others by its value: the problem is a Opaque, which has "
                        r"no fingerprint"),
    ],
)  # fmt: skip
def test_the_checker_compares_problems_not_prompts(game: SecretGame, expected: str) -> None:
    with pytest.raises(AssertionError) as raised:
        check_adapter(game, across_processes=False)
    lines = [line.removeprefix("- ") for line in str(raised.value).splitlines()]
    assert any(re.search(expected, line) for line in lines), lines


def test_a_first_guess_that_peeks_at_the_secret_is_warned_of() -> None:
    summary = check_adapter(PeekingGame(), across_processes=False)
    (warning,) = [line for line in summary.splitlines() if line.startswith("warning:")]
    assert re.fullmatch(
        r"warning: problems that share the prompt 'I am thinking of a number from 1 to 16\. '"
        r"\.\.\. \(70 characters\) have different references \(' \d+' and ' \d+'\), but a model "
        r"sees the prompt, not the problem: .* \(reference_turn\)",
        warning,
    ), warning
