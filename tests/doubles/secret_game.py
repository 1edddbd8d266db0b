"""A hidden-secret game for the tests: guess a number, told "higher" or "lower".

Every problem has the same prompt; the secret is in the problem alone, so
only the environment's replies tell one problem from another. It is what
`mathrl.problem_keys` and the fake's `Known` are for: the checker compares
its problems by value, and the fake learns it, the first guess being the
same whatever the secret (the middle), and each later one the middle of what
the replies so far leave (`reference_turn`, which a model reads off the
replies; the task reads it off the secret, which says the same).

`ChatSecretGame` is the game in a chat. `PeekingGame` is the same game
written wrong: its first guess is the secret, which no model can see.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from mathrl.adapter import Feedback, Response

HIGHEST = 16
PROMPT = f"I am thinking of a number from 1 to {HIGHEST}. Guess it in five tries.\nGuess:"


@dataclass(frozen=True, slots=True)
class Game:
    """One game: the secret, and which game it is (held-out games are other games)."""

    secret: int
    serial: str


def guess_of(response: str) -> int | None:
    """The number a turn guesses, or None if it is not one from 1 to HIGHEST (or was cut off
    at the token limit)."""
    if getattr(response, "ended", None) == "length":
        return None
    text = response.strip()
    if not text.isdigit() or len(text) > 3:
        return None
    number = int(text)
    return number if 1 <= number <= HIGHEST else None


def bounds(secret: int, responses: Sequence[str]) -> tuple[int, int]:
    """The lowest and highest numbers the replies to `responses` still leave."""
    low, high = 1, HIGHEST
    for response in responses:
        guess = guess_of(response)
        if guess is not None and guess < secret:
            low = max(low, guess + 1)
        elif guess is not None and guess > secret:
            high = min(high, guess - 1)
    return low, high


class SecretGame:
    """Guess the number in at most five turns: reward 1 for finding it, 0 otherwise."""

    name = "secret-game"
    max_turns = 5
    max_tokens = 8
    episode_tokens = 256

    def build_dataset(self, seed: int, step: int, size: int) -> list[Game]:
        rng = random.Random(f"secret-game/{seed}/{step}")
        return [Game(rng.randint(1, HIGHEST), f"{seed}/{step}/{i}") for i in range(size)]

    def heldout_dataset(self, seed: int, size: int) -> list[Game]:
        rng = random.Random(f"secret-game/heldout/{seed}")
        return [Game(rng.randint(1, HIGHEST), f"{seed}/heldout/{i}") for i in range(size)]

    def make_prompt(self, problem: Game) -> str:
        return PROMPT

    def feedback(self, problem: Game, responses: Sequence[Response]) -> Feedback:
        guess = guess_of(responses[-1])
        if guess == problem.secret:
            return Feedback(None)
        if guess is None:
            return Feedback(f"a number from 1 to {HIGHEST}, please\nGuess:")
        return Feedback(f"{'higher' if guess < problem.secret else 'lower'}\nGuess:")

    def compute_reward(self, completion: Response, problem: Game) -> float:
        return 1.0 if guess_of(completion) == problem.secret else 0.0

    def reference_completion(self, problem: Game) -> str:
        return f" {(1 + HIGHEST) // 2}"

    def reference_turn(self, problem: Game, responses: Sequence[Response]) -> str:
        low, high = bounds(problem.secret, responses)
        return f" {(low + high) // 2}"

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else 0.0


class ChatSecretGame(SecretGame):
    """The game in a chat: the prompt is a user's message, and so is each reply."""

    name = "chat-secret-game"

    def make_prompt(self, problem: Game) -> list[dict[str, str]]:  # type: ignore[override]  # chat, not text
        return [{"role": "user", "content": PROMPT}]


class PeekingGame(SecretGame):
    """The game with a first guess that peeks: the secret itself, which the prompt hides."""

    name = "peeking-game"

    def reference_completion(self, problem: Game) -> str:
        return f" {problem.secret}"
