"""FakeSampler: the fake's sampler, pinned to the weights of one checkpoint.

Every completion's randomness is keyed to the backend's seed, the
checkpoint (less the task's code version: `sampling_name`), the request's
seed and the sample's index, so runs replay exactly and a retried request
returns the same samples.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mathrl.backend import Completion, SampleParams

if TYPE_CHECKING:
    from mathrl_fakes.fake_backend import FakeBackend


CODE_SEGMENT = re.compile(r"-[0-9a-f]{8}(?=-(step|state)[0-9]+$)")


def sampling_name(name: str) -> str:
    """The checkpoint's name as the fake's randomness sees it: less the task's code version.

    mathrl's names end `-<fingerprint>-<code>-step<N>`. The code version is
    there so an edited task never overwrites its old checkpoints; what the
    fake samples from given weights should not change with it, so the same
    settings keep drawing the same samples across edits of a task's code.
    """
    if CHECKPOINT_TWO_HEX.search(name):
        return CODE_SEGMENT.sub("", name, count=1)
    return name


CHECKPOINT_TWO_HEX = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{8}-(step|state)[0-9]+$")


class FakeSampler:
    """A sampler pinned to the weights of one checkpoint."""

    def __init__(self, backend: FakeBackend, name: str, theta: Sequence[float]) -> None:
        self._backend = backend
        self.name = name
        self.theta = tuple(theta)
        self._unseeded: Counter[tuple[int, ...]] = Counter()

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1 (got {num_samples})")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 (got {params.max_tokens})")
        if not (params.temperature >= 0 and math.isfinite(params.temperature)):
            raise ValueError(f"temperature must be finite and >= 0 (got {params.temperature})")
        prompt = tuple(prompt_T)
        if params.seed is None:
            # Unseeded requests still replay exactly: key on how many times this
            # sampler has seen this prompt.
            self._unseeded[prompt] += 1
            request_key = f"unseeded-{self._unseeded[prompt]}"
        else:
            request_key = f"seed-{params.seed}"
        weights = sampling_name(self.name)
        key = f"{self._backend.seed}/{weights}/{request_key}/{','.join(map(str, prompt))}"
        model = self._backend.model
        return await self._backend.call(
            "sample", lambda: model.sample(self.theta, prompt, key, num_samples, params)
        )

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        vocab_size = self._backend.tokenizer.vocab_size
        if any(not 0 <= t < vocab_size for t in tokens_T):
            raise ValueError(f"token ids must be in 0..{vocab_size - 1}")
        tokens, model = tuple(tokens_T), self._backend.model
        return await self._backend.call(
            "compute_logprobs", lambda: model.sequence_logprobs(self.theta, tokens)
        )
