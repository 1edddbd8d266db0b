"""Conversation prompts: the fake's chat template, a real Hugging Face one, and a chat task."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import strategies as st_
from conftest import checks_passed
from doubles.chatml import byte_level_chatml
from mathrl.adapter import Message, Response
from mathrl.config import TrainConfig
from mathrl.loop import run_grpo
from mathrl.resolved import as_task
from mathrl.rollout import prompt_tokens, run_problems, sample_params
from mathrl.service.hf_tokenizer import HFTokenizer, stop_sequences
from mathrl_fakes import ByteTokenizer, FakeBackend
from observing import moves_toward_its_references

TOK = ByteTokenizer()
EOS = TOK.eos_token_id


class ChatSum:
    """Add two numbers, asked in a conversation; the answer is the assistant's whole turn."""

    name = "chat-sum"
    max_tokens = 8

    def build_dataset(self, seed: int, step: int, size: int) -> list[tuple[int, int]]:
        rng = random.Random(f"chat-sum/{seed}/{step}")
        return [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(size)]

    def make_prompt(self, problem: tuple[int, int]) -> list[Message]:
        a, b = problem
        return [
            {"role": "system", "content": "Answer with the number only."},
            {"role": "user", "content": f"What is {a} + {b}?"},
        ]

    def compute_reward(self, completion: Response, problem: tuple[int, int]) -> float:
        # Full marks only for the number alone, at the end of the turn.
        right = completion.strip() == str(sum(problem))
        return 1.0 if right and completion.ended == "end_of_turn" else 0.0

    def reference_completion(self, problem: tuple[int, int]) -> str:
        return str(sum(problem))

    def evaluate(self, rewards: Sequence[float]) -> float:
        return sum(r == 1.0 for r in rewards) / len(rewards) if rewards else 0.0


def test_the_fakes_chat_template_worked_example() -> None:
    # Each turn: role, newline, content, EOS; then the assistant's turn opens.
    messages = [{"role": "user", "content": "hi"}]
    assert TOK.render_chat(messages, {}) == [*b"user\nhi", EOS, *b"assistant\n"]
    assert TOK.end_of_turn_id == EOS
    # Options change nothing here: the fake has no thinking mode.
    assert TOK.render_chat(messages, {"enable_thinking": False}) == TOK.render_chat(messages, {})


@given(st_.messages)
def test_no_text_forges_a_turn_boundary(messages: list[dict[str, str]]) -> None:
    tokens = TOK.render_chat(messages, {})
    # One EOS a message, each right after that message's content: never inside text.
    assert tokens.count(EOS) == len(messages)
    assert tokens[-len(b"assistant\n") :] == list(b"assistant\n")


def test_a_chat_task_stops_at_the_end_of_its_turn_and_learns_on_the_fake() -> None:
    task = as_task(ChatSum())
    prompt = task.adapter.make_prompt((2, 3))
    assert not isinstance(prompt, str)
    assert task.stop_for(prompt) == ()
    params = sample_params(task, TrainConfig(), prompt, seed=1)
    assert (params.stop, params.end_of_turn) == ((), True)
    assert prompt_tokens(TOK, task, prompt) == TOK.render_chat(prompt, {})
    checks_passed(ChatSum())


def test_a_short_chat_run_moves_toward_its_references(tmp_path: Path) -> None:
    moves_toward_its_references(ChatSum(), tmp_path)


@pytest.mark.slow  # a 20-step learning run; the fast suite's representative is above
def test_a_chat_task_passes_the_learning_check() -> None:
    # One check more with learns=True: a 20-step run on the fake, which learned.
    assert checks_passed(ChatSum(), learns=True) == checks_passed(ChatSum()) + 1


@pytest.mark.slow  # a 20-step learning run; the fast suite's representative is above
def test_a_chat_task_trains_through_the_loop(tmp_path: Any) -> None:
    config = TrainConfig(steps=20, batch=8, group=4)
    backend = FakeBackend.for_run(
        ChatSum(), run_problems(ChatSum(), config), checkpoint_dir=tmp_path
    )
    accuracy = [m.accuracy for m in run_grpo(backend, ChatSum(), config).steps]
    assert sum(accuracy[-5:]) / 5 >= sum(accuracy[:5]) / 5 + 0.2


# -- a real Hugging Face tokenizer, built offline ---------------------------------------

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
"""Qwen's ChatML, with Qwen3's switch for thinking."""


@pytest.fixture(scope="module")
def chatml() -> Any:
    """A byte-level BPE tokenizer with ChatML special tokens and template: no hub, no files."""
    return byte_level_chatml(CHATML)


def test_a_real_chat_template_renders_the_prompt_and_ends_turns(chatml: Any) -> None:
    tokenizer = HFTokenizer(chatml)
    messages = [{"role": "user", "content": "héllo"}]
    tokens = tokenizer.render_chat(messages, {})
    assert chatml.decode(tokens) == "<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n"
    thinking_off = tokenizer.render_chat(messages, {"enable_thinking": False})
    assert chatml.decode(thinking_off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    im_end = chatml.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.end_of_turn_id == im_end != tokenizer.eos_token_id
    # Sampling a conversation stops at end-of-turn as well as at EOS, named as ids or text.
    assert stop_sequences((), tokenizer, end_of_turn=True) == [tokenizer.eos_token_id, im_end]
    assert stop_sequences(("END",), tokenizer, end_of_turn=True) == [
        "END", "<|endoftext|>", "<|im_end|>"
    ]  # fmt: skip
    assert stop_sequences((), tokenizer) == [tokenizer.eos_token_id]


def test_the_reward_sees_the_assistants_text_without_the_end_of_turn(chatml: Any) -> None:
    from mathrl.rewards import response_of

    tokenizer = HFTokenizer(chatml)
    answer = [*chatml.encode("5"), tokenizer.end_of_turn_id]
    response = response_of(tokenizer, answer, (), chat=True)
    assert (str(response), response.ended) == ("5", "end_of_turn")


def test_a_reply_appended_to_the_sampled_turn_is_the_templates_whole_conversation(
    chatml: Any,
) -> None:
    tokenizer = HFTokenizer(chatml)
    user = {"role": "user", "content": "Guess my digit."}
    sampled = [*chatml.encode("3"), tokenizer.end_of_turn_id]  # "3<|im_end|>" as sampled
    reply = tokenizer.render_reply({"role": "user", "content": "higher"}, {})
    # The separator after <|im_end|> (a newline), the message, the assistant's opening.
    assert chatml.decode(reply) == "\n<|im_start|>user\nhigher<|im_end|>\n<|im_start|>assistant\n"
    # Prompt + sampled turn + reply is what the template renders for the whole conversation.
    whole = [user, {"role": "assistant", "content": "3"}, {"role": "user", "content": "higher"}]
    assert tokenizer.render_chat([user], {}) + sampled + reply == tokenizer.render_chat(whole, {})
    off = tokenizer.render_reply({"role": "user", "content": "higher"}, {"enable_thinking": False})
    assert chatml.decode(off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


QWEN3_LIKE = (
    "{% set ns = namespace(last_user=-1) %}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' and loop.index0 > ns.last_user %}<think>\n\n</think>\n\n"
    "{% endif %}{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Like Qwen3's: an empty thinking block on assistant turns after the last user message only."""


def test_a_template_that_rewrites_earlier_turns_still_gives_the_reply_alone(chatml: Any) -> None:
    from mathrl.backend import BackendError

    def tokenizer_with(template: str | None) -> HFTokenizer:
        return HFTokenizer(chatml.__class__(tokenizer_object=chatml.backend_tokenizer,
            eos_token="<|endoftext|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"],
            chat_template=template))  # fmt: skip

    # The assistant's turn renders with a thinking block alone, without one once a
    # user message follows: only the reply is taken, never the history re-rendered.
    qwen3 = tokenizer_with(QWEN3_LIKE)
    reply = qwen3.render_reply({"role": "user", "content": "higher"}, {})
    assert chatml.decode(reply) == "\n<|im_start|>user\nhigher<|im_end|>\n<|im_start|>assistant\n"
    # Mistral-style: only the assistant's turn ends with an end-of-turn token (here the
    # end of text), a user's does not: the reply is everything after the assistant's.
    mistral = tokenizer_with(
        "{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %}{{ m['content'] }}<|endoftext|>{% endif %}{% endfor %}"
    )
    assert mistral.end_of_turn_id == mistral.eos_token_id
    reply = mistral.render_reply({"role": "user", "content": "higher"}, {})
    assert chatml.decode(reply) == "[INST] higher [/INST]"
    # A template with no end-of-turn token after an assistant's turn cannot take a reply.
    bare = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% endfor %}"
    with pytest.raises(BackendError, match="does not end an assistant's turn with its end-of"):
        tokenizer_with(bare).render_reply({"role": "user", "content": "higher"}, {})
    plain = HFTokenizer(
        chatml.__class__(tokenizer_object=chatml.backend_tokenizer, eos_token="<|endoftext|>")
    )
    with pytest.raises(BackendError, match="has no chat template"):
        plain.render_reply({"role": "user", "content": "higher"}, {})


def test_a_tokenizer_without_a_chat_template_refuses_conversations(chatml: Any) -> None:
    from mathrl.backend import BackendError

    plain = chatml.__class__(tokenizer_object=chatml.backend_tokenizer, eos_token="<|endoftext|>")
    tokenizer = HFTokenizer(plain)
    assert tokenizer.end_of_turn_id == tokenizer.eos_token_id
    with pytest.raises(BackendError, match="has no chat template"):
        tokenizer.render_chat([{"role": "user", "content": "hi"}], {})


def test_a_chat_task_runs_over_the_fake_mint_sdk() -> None:
    # The fake SDK's tokenizer renders the fake's chat template, so MintBackend runs chat tasks.
    from doubles.fake_mint import FakeHFTokenizer

    hf = HFTokenizer(FakeHFTokenizer())
    messages = [{"role": "user", "content": "hi"}]
    assert hf.render_chat(messages, {}) == TOK.render_chat(messages, {})
    assert hf.end_of_turn_id == EOS
