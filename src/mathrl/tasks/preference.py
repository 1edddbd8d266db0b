"""Preference chat (the seed's RL-2): answers judged against each other, and against a baseline.

The model answers a short question in a conversation (the model's chat
template, thinking off). A judge compares answers in pairs with a
helpfulness proxy: the seed's length, structure and diversity criteria,
fixed (see below). Each completion's reward has two parts:

- `preference`: 0.3 x its win rate against the other members of its group
  (a win 1, a tie 1/2, a loss 0; a group of one gets 1/2), from
  `mathrl.pairwise.win_rates`;
- `baseline`: 0.7 if the judge prefers it to the task's baseline answer, a
  fluent, well-formed answer to no question in particular, else 0.

Accuracy is the share of completions the judge prefers to the baseline
answer: a reward of 0.7 or more. A group's mean win rate is always 1/2, so
the baseline part is what lets the mean reward show learning (the mean-1/2
trap of `mathrl.pairwise`).

The judge's proxy scores an answer out of six, one point each: it ended at
the end of its turn (not cut off at the token limit); it is plain text
(letters, digits, spaces and common punctuation only); it names the
question's topic; it has 20 to 80 words; it has 2 to 5 sentences, none
repeated; and at least 60% of its words are distinct. The higher score
wins. The seed's version scored each answer alone, ignored the question,
counted every "." as a sentence, and gave an answer cut off mid-sentence,
or padded with garbage, full marks.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mathrl.adapter import Message, Response
from mathrl.pairwise import win_rates

SYSTEM = "You are a helpful assistant. Answer in two to five plain sentences."
PREFERENCE, BASELINE = 0.3, 0.7
"""The weights of the two reward parts."""
CORRECT = BASELINE
"""The least reward of a completion the judge prefers to the baseline answer."""
BASELINE_ANSWER = (
    "That is a good question, and the answer depends on several things. Experts have "
    "studied it for many years and still discuss the details today. A trusted reference "
    "would help you read more about it."
)
"""A fluent, well-formed answer to no question in particular: it meets every criterion of
the judge's but being on topic, so only an answer that is on topic and whole beats it."""


@dataclass(frozen=True, slots=True)
class Question:
    """A question, the words that show an answer is on its topic, and a model answer."""

    text: str
    topic: tuple[str, ...]
    answer: str


QUESTIONS = (
    Question(
        "Explain what a variable is in programming.",
        ("variable",),
        "A variable is a name that refers to a value stored in memory. Programs read "
        "it and change it as they run. Good names make code easier to follow.",
    ),
    Question(
        "Write a short poem about the ocean.",
        ("ocean", "sea", "wave"),
        "The ocean breathes in silver light. Its waves roll slowly toward the shore. "
        "Gulls drift above the restless blue, and evening folds the tide to sleep.",
    ),
    Question(
        "What are three benefits of exercise?",
        ("exercise",),
        "Regular exercise strengthens the heart and lungs. It lifts your mood by "
        "easing stress. It also helps you sleep deeply and keep a healthy weight.",
    ),
    Question(
        "Describe how to make a cup of tea.",
        ("tea",),
        "Boil fresh water and warm the cup. Steep a tea bag or loose leaves for a few "
        "minutes. Remove the leaves, then add milk or honey if you like.",
    ),
    Question(
        "Why is the sky blue?",
        ("sky", "blue", "light"),
        "Sunlight holds every colour of light. Air molecules scatter short blue waves "
        "far more than red ones. That scattered blue light reaches our eyes from "
        "every direction of the sky.",
    ),
    Question(
        "Give tips for better sleep.",
        ("sleep",),
        "Keep a steady bedtime, even on weekends. Avoid screens and caffeine late in "
        "the evening. A cool, dark and quiet room helps you sleep through the night.",
    ),
    Question(
        "What is machine learning?",
        ("learning", "learn"),
        "Machine learning is a way to build programs that learn from examples. "
        "Instead of fixed rules, a model finds patterns in data. It then uses those "
        "patterns to make predictions.",
    ),
    Question(
        "How do plants make food?",
        ("plant", "photosynthesis"),
        "Plants make food through photosynthesis. Their leaves capture sunlight and "
        "take in carbon dioxide and water. They turn these into sugar and release "
        "oxygen.",
    ),
    Question(
        "Why do we have seasons?",
        ("season",),
        "Seasons come from the tilt of the Earth. As it orbits the sun, each half "
        "leans toward the light for part of the year. Longer, more direct sunlight "
        "brings summer.",
    ),
    Question(
        "How does a rainbow form?",
        ("rainbow",),
        "A rainbow forms when sunlight passes through raindrops. Each drop bends and "
        "reflects the light. Different colours bend by different amounts, so they "
        "spread into an arc.",
    ),
    Question(
        "What does a compiler do?",
        ("compiler", "compile"),
        "A compiler translates source code into instructions a machine can run. It "
        "checks the program for errors first. Then it produces fast, efficient "
        "output.",
    ),
    Question(
        "Why should I drink water?",
        ("water",),
        "Water keeps your body cool and your joints moving smoothly. It carries "
        "nutrients to your cells. Drinking enough also helps you stay focused and "
        "alert.",
    ),
    Question(
        "How do vaccines work?",
        ("vaccine", "immune"),
        "A vaccine shows the immune system a harmless piece of a germ. The body learns "
        "to recognise it and builds defences. Later, a real infection is fought off "
        "quickly.",
    ),
    Question(
        "What is a healthy breakfast?",
        ("breakfast",),
        "A healthy breakfast mixes protein, fibre and some fruit. Oatmeal with nuts "
        "and berries is a simple choice. Eggs with whole grain toast also keep you "
        "full.",
    ),
    Question(
        "How can I learn a new language?",
        ("language",),
        "Practise the new language a little every day instead of cramming. Listen to "
        "native speakers and repeat what they say. Speaking early, even with mistakes, "
        "builds confidence quickly.",
    ),
    Question(
        "Why do cats purr?",
        ("cat", "purr"),
        "Cats purr when they feel calm and content. They also purr to soothe "
        "themselves when hurt or anxious. The sound comes from quick movements of "
        "muscles in the throat.",
    ),
    Question(
        "What causes thunder?",
        ("thunder", "lightning"),
        "Thunder is the sound of lightning. A bolt heats the air so fast that it "
        "expands with a bang. Because light travels faster, we see the flash before "
        "we hear it.",
    ),
    Question(
        "How do I stay focused while studying?",
        ("focus", "study", "studying"),
        "Study in short blocks with brief breaks between them. Put your phone in "
        "another room. Clear goals for each session make it easier to stay focused.",
    ),
    Question(
        "What is the internet?",
        ("internet", "network"),
        "The internet is a global network of connected computers. They exchange data "
        "using shared rules called protocols. It lets people share pages, messages and "
        "video across the world.",
    ),
    Question(
        "Why do leaves change colour in autumn?",
        ("leaves", "leaf", "autumn"),
        "In autumn, trees stop making green chlorophyll. As it fades, yellow and "
        "orange pigments in the leaves show through. Some trees also make red "
        "pigments as the days cool.",
    ),
)
"""The seed's eight questions, then twelve more; one in five is held out (by hash)."""


def _heldout(question: Question) -> bool:
    digest = hashlib.blake2b(question.text.encode(), digest_size=1).digest()
    return digest[0] % 5 == 0


TRAINING = tuple(q for q in QUESTIONS if not _heldout(q))
HELDOUT = tuple(q for q in QUESTIONS if _heldout(q))

_WORD = re.compile(r"[A-Za-z']+")
PUNCTUATION = frozenset(".,;:!?'\"()-")
"""What a plain-text answer may hold besides letters, digits and spaces."""


def sentences(text: str) -> list[str]:
    """The text's sentences (with a letter, ended by . ! or ?), lower-cased, in linear time.

    A scan, not a regular expression: `[^.]*x[^.]*[.]` backtracks for minutes
    on a long text without a full stop, and a reward must never hang.
    """
    found, start = [], 0
    for i, c in enumerate(text):
        if c in ".!?":
            piece = text[start:i].strip().lower()
            if any(ch.isalpha() for ch in piece):
                found.append(piece)
            start = i + 1
    return found


def helpfulness(answer: Response, question: Question) -> int:
    """The judge's proxy: one point for each of six criteria (see the module docstring)."""
    words = [w.lower() for w in _WORD.findall(answer)]
    said = sentences(answer)
    on_topic = any(w.startswith(t) for w in words for t in question.topic)
    return sum(
        (
            answer.ended in ("end_of_turn", "end_of_sequence"),
            all(c.isalnum() or c.isspace() or c in PUNCTUATION for c in answer),
            on_topic,
            20 <= len(words) <= 80,
            2 <= len(said) <= 5 and len(set(said)) == len(said),
            bool(words) and len(set(words)) >= 0.6 * len(words),
        )
    )


def prefer(a: int, b: int) -> float:
    """The pairwise outcome of scores `a` against `b`: a win 1, a tie 1/2, a loss 0."""
    return 1.0 if a > b else 0.5 if a == b else 0.0


class PreferenceChat:
    """The seed's `PreferenceChatAdapter`, made a pairwise preference with an honest accuracy."""

    name = "preference"
    max_tokens = 320
    """Room for a five-sentence answer, in bytes on the fake backend (about 80 real tokens)."""
    chat_template_options = {"enable_thinking": False}  # noqa: RUF012  (read, never changed)

    def build_dataset(self, seed: int, step: int, size: int) -> list[Question]:
        rng = random.Random(f"preference/{seed}/{step}")
        return [rng.choice(TRAINING) for _ in range(size)]

    def heldout_dataset(self, seed: int, size: int) -> list[Question]:
        order = list(HELDOUT)
        random.Random(f"preference/heldout/{seed}").shuffle(order)
        return [order[i % len(order)] for i in range(size)]

    def make_prompt(self, problem: Question) -> list[Message]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": problem.text}]

    def compute_reward(self, completion: Response, problem: Question) -> dict[str, float]:
        """One answer alone: as the group rewards give a group of one."""
        return self.compute_group_rewards([completion], problem)[0]

    def compute_group_rewards(
        self, responses: Sequence[Response], problem: Question
    ) -> list[dict[str, float]]:
        scores = [helpfulness(r, problem) for r in responses]
        baseline = helpfulness(Response(BASELINE_ANSWER, "end_of_turn"), problem)
        return [
            {"preference": PREFERENCE * rate, "baseline": BASELINE * (score > baseline)}
            for score, rate in zip(scores, win_rates(scores, prefer), strict=True)
        ]

    def reference_completion(self, problem: Question) -> str:
        return problem.answer

    def wrong_completions(self, problem: Question) -> list[str]:
        """Answers the judge should rank low: the baseline, and the answer cut to one sentence."""
        return [BASELINE_ANSWER, problem.answer.split(". ")[0] + "."]

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of answers the judge prefers to the baseline answer."""
        return sum(r >= CORRECT for r in rewards) / len(rewards) if rewards else 0.0
