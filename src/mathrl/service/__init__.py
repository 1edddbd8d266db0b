"""Talking to a training service: MinT, and what any remote backend needs around it.

- `mint_backend`: `MintBackend`, the `Backend` protocol over MinT; the only
  module that imports mint.
- `probe`, `deadline`, `hf_tokenizer`: a quick look at the endpoint before the
  SDK takes over, set-up under a deadline, and the tokenizer and stop list.
- `retry`: deadlines and retries for any call; `recovery`: `RetryingBackend`,
  which retries around any backend without ever applying a training step twice.
"""
