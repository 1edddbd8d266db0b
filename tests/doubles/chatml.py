"""A real Hugging Face tokenizer with ChatML's special tokens, built here: no hub, no files.

A byte-level BPE with no merges (every byte its own token), `<|endoftext|>` as its end of
sequence and `<|im_start|>`/`<|im_end|>` as special tokens, rendering the chat `template`
given: the tests' stand-in for Qwen's tokenizer and its Jinja chat template.
"""

from __future__ import annotations

import importlib
from typing import Any


def byte_level_chatml(template: str) -> Any:
    """A `transformers.PreTrainedTokenizerFast` as the module docstring says, with `template`."""
    # A dependency of mindlab-toolkit, so always there; imported here, as it takes a second.
    transformers: Any = importlib.import_module("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        chat_template=template,
    )
