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

from collections.abc import Sequence
from typing import Protocol

from mathrl.backend import BackendError


class HFTokenizerLike(Protocol):
    """The part of a Hugging Face tokenizer mathrl uses."""

    @property
    def eos_token_id(self) -> int | None: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str: ...
    def __len__(self) -> int: ...


class HFTokenizer:
    """A Hugging Face tokenizer as a `mathrl.backend.Tokenizer`.

    `decode` skips special tokens, so a completion's EOS is not part of its text.
    """

    def __init__(self, hf: HFTokenizerLike) -> None:
        if hf.eos_token_id is None:
            raise BackendError("the model's tokenizer has no EOS token; sampling needs one")
        self._hf = hf
        self._eos = hf.eos_token_id
        self.eos_text = hf.decode([self._eos])
        """The EOS token as text, for stop strings."""

    @property
    def eos_token_id(self) -> int:
        return self._eos

    @property
    def vocab_size(self) -> int:
        return len(self._hf)  # get_info has no vocabulary size; the tokenizer's length is it

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text))

    def decode(self, tokens: Sequence[int]) -> str:
        return self._hf.decode(list(tokens), skip_special_tokens=True)


def stop_sequences(stop: Sequence[str], tokenizer: HFTokenizer) -> list[str] | list[int]:
    """`SamplingParams.stop` for `stop` strings plus EOS (see the module docstring)."""
    if not stop:
        return [tokenizer.eos_token_id]
    if not tokenizer.eos_text:
        raise BackendError("the EOS token decodes to no text, so it cannot join stop strings")
    return list(dict.fromkeys([*stop, tokenizer.eos_text]))
