"""The fake's tokenizer: UTF-8 bytes, one end-of-sequence token, and a chat template.

For: `FakeModel` and every test that needs a tokenizer without a download.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

EOS = 256
VOCAB_SIZE = 257


class ByteTokenizer:
    """Tokens 0-255 are the bytes of UTF-8 text; token 256 is end-of-sequence.

    `decode(encode(s)) == s` for every string, lone surrogates included.
    EOS decodes to "". Bytes that are not valid UTF-8 decode to U+FFFD.

    Its chat template: each message is `role`, a newline, `content`, then the
    EOS token, which ends every turn (it is the end-of-turn token too);
    `render_chat` then opens the assistant's turn with `assistant` and a
    newline. No text can forge a turn boundary: text encodes to bytes only.
    The `tools` option (a task's tools' schemas) comes first, as a message of
    role `tools` whose content is their JSON, as a Hugging Face template puts
    them in its system prompt. Other template options (Qwen3's
    `enable_thinking`, say) are accepted and change nothing, as a Hugging
    Face template ignores variables it does not use.
    """

    @property
    def eos_token_id(self) -> int:
        return EOS

    @property
    def end_of_turn_id(self) -> int:
        return EOS

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8", "surrogatepass"))

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], options: Mapping[str, Any]
    ) -> list[int]:
        tools = options.get("tools")
        if tools:
            messages = [{"role": "tools", "content": json.dumps(tools)}, *messages]
        return self._turns(messages) + self.encode("assistant\n")

    def _turns(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        tokens: list[int] = []
        for message in messages:
            tokens += self.encode(f"{message['role']}\n{message['content']}")
            tokens.append(EOS)
        return tokens

    def render_reply(
        self,
        message: Mapping[str, str] | Sequence[Mapping[str, str]],
        options: Mapping[str, Any],
    ) -> list[int]:
        """More messages after an assistant's turn (which ended with EOS): no separator."""
        messages = [message] if isinstance(message, Mapping) else list(message)
        return self._turns(messages) + self.encode("assistant\n")

    def decode(self, tokens: Sequence[int]) -> str:
        for t in tokens:
            if not 0 <= t < VOCAB_SIZE:
                raise ValueError(f"token ids must be in 0..{VOCAB_SIZE - 1} (got {t})")
        data = bytes(t for t in tokens if t != EOS)
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return data.decode("utf-8", "replace")
