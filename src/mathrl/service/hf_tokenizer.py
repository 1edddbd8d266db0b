"""A Hugging Face tokenizer as a `mathrl.backend.Tokenizer`, and MinT's stop list.

For: MintBackend, which gets its tokenizer from the SDK. Not for: loading a
tokenizer (the SDK does that) or anything that needs mint.

Stop sequences: `SampleParams.stop` holds strings, and sampling must also stop
at EOS. `SamplingParams.stop` takes strings or token ids, never both, so with
stop strings we send them plus the EOS token's text (`decode([eos])`), and
without any we send `[eos_token_id]`. We always send the EOS stop rather than
trust a server default we cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mathrl.backend import BackendError


class NoChatTemplate(BackendError):
    """The model's tokenizer has no chat template, and a conversation was to be rendered."""


class HFTokenizerLike(Protocol):
    """The part of a Hugging Face tokenizer mathrl uses."""

    @property
    def eos_token_id(self) -> int | None: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str: ...
    def __len__(self) -> int: ...
    @property
    def all_special_ids(self) -> list[int]: ...
    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any: ...


class HFTokenizer:
    """A Hugging Face tokenizer as a `mathrl.backend.Tokenizer`.

    `decode` skips special tokens, so a completion's EOS is not part of its text.
    """

    def __init__(self, hf: HFTokenizerLike) -> None:
        if hf.eos_token_id is None:
            raise BackendError("the model's tokenizer has no EOS token; sampling needs one")
        self._hf = hf
        self._eos = hf.eos_token_id
        self._end_of_turn: int | None = None
        self._history_ends: dict[str, int] = {}
        """End-of-turn tokens of `render_reply`'s short history, by template options."""

    @property
    def eos_token_id(self) -> int:
        return self._eos

    @property
    def vocab_size(self) -> int:
        return len(self._hf)  # its ids, added tokens too (the model may have more: `Backend`)

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text))

    def decode(self, tokens: Sequence[int]) -> str:
        return self._hf.decode(list(tokens), skip_special_tokens=True)

    def decode_special(self, token: int) -> str:
        """One special token's own text (`<|im_end|>`), for stop strings."""
        return self._hf.decode([token])

    @property
    def end_of_turn_id(self) -> int:
        """The token the chat template puts after an assistant's message (EOS without one)."""
        if self._end_of_turn is None:
            self._end_of_turn = self._find_end_of_turn()
        return self._end_of_turn

    def _find_end_of_turn(self) -> int:
        if not getattr(self._hf, "chat_template", None):
            return self._eos
        mark = "mathrl-end-of-turn-probe"
        rendered = self._chat(
            [{"role": "user", "content": "?"}, {"role": "assistant", "content": mark}]
        )
        text = self._hf.encode(mark)
        for i in range(len(rendered) - len(text), -1, -1):
            if rendered[i : i + len(text)] == text:
                after = rendered[i + len(text) :]
                special = {
                    *self._hf.all_special_ids,
                    *getattr(self._hf, "added_tokens_decoder", {}),
                }
                return next((t for t in after if t in special), after[0] if after else self._eos)
        return self._eos

    def _chat(self, messages: Sequence[Mapping[str, str]], **options: Any) -> list[int]:
        rendered = self._hf.apply_chat_template(
            [dict(m) for m in messages], tokenize=True, **options
        )
        if isinstance(rendered, Mapping):  # transformers 5 answers with a BatchEncoding
            rendered = rendered["input_ids"]
        return [int(t) for t in rendered]

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], options: Mapping[str, Any]
    ) -> list[int]:
        self._require_template()
        return self._chat(messages, add_generation_prompt=True, **options)

    def _require_template(self) -> None:
        if not getattr(self._hf, "chat_template", None):
            raise NoChatTemplate(
                "the model's tokenizer has no chat template, so a task's conversation prompts "
                "cannot be rendered: use a chat model, or text prompts"
            )

    def render_reply(
        self,
        message: Mapping[str, str] | Sequence[Mapping[str, str]],
        options: Mapping[str, Any],
    ) -> list[int]:
        """What the template writes after an assistant's end-of-turn: separator, message (or
        messages), opening.

        Read off a short conversation ending with an assistant's turn, then
        `message`: everything after that turn's end-of-turn token. Only the
        reply is taken from the rendering; the turns before it stay as they
        were sampled, so a template that renders an earlier turn differently
        (Qwen3 drops its thinking) changes nothing here. Several messages (a
        turn's tool results) render together, as the template groups them
        (Qwen3: one user turn of `<tool_response>` blocks).
        """
        messages = [message] if isinstance(message, Mapping) else list(message)
        self._require_template()
        history = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
        key = repr(sorted(options.items()))  # every reply renders; the history once per options
        if key not in self._history_ends:
            self._history_ends[key] = self._chat(history, **options).count(self.end_of_turn_id)
        before = self._history_ends[key]
        rendered = self._chat([*history, *messages], add_generation_prompt=True, **options)
        ends = [i for i, t in enumerate(rendered) if t == self.end_of_turn_id]
        if before == 0 or len(ends) < before:
            raise BackendError(
                "the model's chat template does not end an assistant's turn with its "
                "end-of-turn token, so an environment's reply cannot follow the sampled "
                "tokens: use text prompts for this task's episodes"
            )
        return rendered[ends[before - 1] + 1 :]


def stop_sequences(
    stop: Sequence[str], tokenizer: HFTokenizer, end_of_turn: bool = False
) -> list[str] | list[int]:
    """`SamplingParams.stop` for `stop` strings plus EOS, and end-of-turn for a conversation.

    (See the module docstring.) Token ids when there are no stop strings;
    otherwise the special tokens' text joins the strings.
    """
    ids = [tokenizer.eos_token_id]
    if end_of_turn and tokenizer.end_of_turn_id != tokenizer.eos_token_id:
        ids.append(tokenizer.end_of_turn_id)
    if not stop:
        return ids
    texts = [tokenizer.decode_special(i) for i in ids]
    if not all(texts):
        raise BackendError("the EOS token decodes to no text, so it cannot join stop strings")
    return list(dict.fromkeys([*stop, *texts]))
