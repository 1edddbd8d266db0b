"""Hypothesis strategies for mathrl's pure core, in one place."""

from __future__ import annotations

from hypothesis import strategies as st

from mathrl.math_task import OPERAND_MAX, AdditionProblem

operands = st.integers(min_value=0, max_value=OPERAND_MAX)
"""An operand of the addition task."""

problems = st.builds(AdditionProblem, operands, operands)
"""Any problem the task can generate."""

seeds = st.integers(min_value=-(2**63), max_value=2**63 - 1)
"""A run seed; negative and huge seeds are legal."""

steps = st.integers(min_value=0, max_value=10_000)
"""A step number."""

any_text = st.text()
"""Arbitrary Unicode, for functions that must never raise."""

integers_in_text = st.integers(min_value=-(10**30), max_value=10**30)
"""An integer to write into text."""

integer_free_text = st.text(
    st.characters(blacklist_categories=["Nd"], blacklist_characters="-"), max_size=20
)
"""Text with no digit (of any script) and no minus sign, to surround an integer."""

rewards = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
"""A finite reward of plausible magnitude (differences cannot overflow)."""

reward_groups = st.lists(rewards, min_size=1, max_size=32)
"""The rewards of one group."""

binary_reward_groups = st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=16)
"""The rewards of one group under an exact-match verifier."""

tokens = st.integers(min_value=0, max_value=151_935)
"""A token id of a Qwen-sized vocabulary."""

prompts_T = st.lists(tokens, min_size=1, max_size=40)
"""A non-empty prompt."""


@st.composite
def completions(draw: st.DrawFn) -> tuple[list[int], list[float]]:
    """A completion (possibly empty) with one sampler logprob per token."""
    tokens_T = draw(st.lists(tokens, max_size=16))
    logprobs_T = draw(
        st.lists(
            st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
            min_size=len(tokens_T),
            max_size=len(tokens_T),
        )
    )
    return tokens_T, logprobs_T


ascii_text = st.text(st.characters(max_codepoint=127))
"""Any ASCII string, the fake tokenizer's domain."""
