"""Problems that share a prompt: a hidden-secret game, checked and learned on the fake.

The game (`doubles.secret_game`) has one prompt for every problem; only the
problem holds the secret. The checker compares its problems, not its
prompts, and the fake learns it from what its contexts show.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from doubles.secret_game import PROMPT, ChatSecretGame, Game, PeekingGame, SecretGame
from mathrl.adapter import Response
from mathrl.backend import BackendError, SampleParams
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.rollout import run_problems
from mathrl.testing import check_adapter
from mathrl_fakes import FakeBackend, FakeModel, references_for
from mathrl_fakes.policy import POSITIONS, ByteTokenizer

BYTES = ByteTokenizer()


@pytest.mark.parametrize("game", [SecretGame(), ChatSecretGame()])
def test_the_game_passes_check_adapter_with_no_warning(game: SecretGame) -> None:
    summary = check_adapter(game)
    identity = f"doubles.secret_game:{type(game).__name__}"
    assert re.fullmatch(rf"task '{game.name}' \({identity}\) passed \d+ checks", summary), summary


def test_the_game_learns_on_the_fake(tmp_path: Path) -> None:
    game = SecretGame()
    config = TrainConfig(steps=20, batch=8, group=4, eval_every=10, eval_problems=16)
    backend = FakeBackend.for_run(game, run_problems(game, config), checkpoint_dir=tmp_path)
    result = run_grpo(backend, game, config)
    assert sum(m.datums for m in result.steps) > 0
    first, *_, last = result.evaluations
    assert (first.step, last.step) == (0, 20)
    assert last.mean_reward >= first.mean_reward + 0.5, (first, last)


def test_the_fakes_first_guess_is_the_same_whatever_the_secret() -> None:
    (reference,) = references_for(SecretGame(), [Game(3, "a"), Game(13, "b")]).values()
    assert (reference.answer, reference.stop) == (" 8", "\n")  # (1 + 16) // 2


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("higher\nGuess:", " 12"),  # 9..16 are left: (9 + 16) // 2
        ("lower\nGuess:", " 4"),  # 1..7 are left: (1 + 7) // 2
        ("colder\nGuess:", None),  # no game the fake knows replies so
    ],
)
def test_the_fakes_later_guess_is_the_one_the_reply_leaves(reply: str, expected: str) -> None:
    (reference,) = references_for(SecretGame(), [Game(3, "a"), Game(13, "b")]).values()
    known = reference.known
    assert known is not None
    said = Response(" 8\n", "stop", "\n")
    after = known.then(said, tuple(BYTES.encode(" 8\n")), tuple(BYTES.encode(reply)), known)
    assert (after.answer if after is not None else None) == expected


@pytest.mark.parametrize("cut_off", [False, True])
def test_a_chat_reply_is_read_as_the_template_renders_it(cut_off: bool) -> None:
    (reference,) = references_for(ChatSecretGame(), [Game(3, "a"), Game(13, "b")]).values()
    known = reference.known
    assert known is not None
    # A turn that ended at its end-of-turn token; or one cut off, whose reply opens with one.
    wrote = (*BYTES.encode(" 8"), *(() if cut_off else (BYTES.end_of_turn_id,)))
    reply = [BYTES.end_of_turn_id] if cut_off else []
    said_back = "a number from 1 to 16, please\nGuess:" if cut_off else "higher\nGuess:"
    reply += BYTES.render_reply({"role": "user", "content": said_back}, {})
    said = Response(" 8", "length" if cut_off else "end_of_turn")
    after = known.then(said, wrote, tuple(reply), known)
    # A guess cut off is no guess: 1..16 are all left, (1 + 16) // 2; else 9..16 are.
    assert after is not None
    assert after.answer == (" 8" if cut_off else " 12")


def test_where_the_problems_disagree_the_fake_learns_the_reference_most_have() -> None:
    # Secrets 5, 5 and 9: ' 5' twice, ' 9' once; the other is written now and then.
    games = [Game(5, "a"), Game(9, "b"), Game(5, "c")]
    (reference,) = references_for(PeekingGame(), games).values()
    assert (reference.answer, reference.wrong) == (" 5", (" 9",))
    # A tie goes to the first in text order: ' 12' before ' 3'.
    (tied,) = references_for(PeekingGame(), [Game(3, "a"), Game(12, "b")]).values()
    assert (tied.answer, tied.wrong) == (" 12", (" 3",))


def test_a_problem_told_twice_counts_once() -> None:
    games = [Game(5, "a"), Game(9, "b"), Game(9, "b"), Game(9, "b")]
    (reference,) = references_for(PeekingGame(), games).values()
    assert reference.answer == " 5"  # ' 5' once, ' 9' once: a tie, not three to one


GREEDY = SampleParams(max_tokens=8, temperature=0.0, stop=("\n",))


def trained(more: Callable[[int], Any] | None) -> FakeModel:
    """A fake told the games with secrets 3 and 5, trained so far that greedy decoding writes
    each target; `more` tells it more games."""
    model = FakeModel(references_for(SecretGame(), [Game(3, "a"), Game(5, "b")]), more=more)
    model.theta = [1.0] * POSITIONS
    return model


def test_the_fake_is_told_more_games_when_none_it_knows_replies_so() -> None:
    told = iter([references_for(SecretGame(), [Game(13, "b")])])
    model = trained(lambda requests: next(told, None))
    first = tuple(BYTES.encode(PROMPT))
    (guess,) = model.sample(model.theta, first, "k", 1, GREEDY)
    assert guess.tokens == tuple(BYTES.encode(" 8\n"))
    # Secrets 3 and 5 reply 'lower' to 8; 'higher' is secret 13's, told next.
    context = (*first, *guess.tokens, *BYTES.encode("higher\nGuess:"))
    (later,) = model.sample(model.theta, context, "k", 1, GREEDY)
    assert later.tokens == tuple(BYTES.encode(" 12\n"))  # 9..16 are left: (9 + 16) // 2


def test_a_reply_no_game_the_fake_knows_gives_is_an_unknown_prompt() -> None:
    model = trained(None)
    first = tuple(BYTES.encode(PROMPT))
    (guess,) = model.sample(model.theta, first, "k", 1, GREEDY)
    context = (*first, *guess.tokens, *BYTES.encode("higher\nGuess:"))
    with pytest.raises(BackendError, match=r"^the fake backend has no reference for the prompt"):
        model.sample(model.theta, context, "k", 1, GREEDY)


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
