"""Stand-ins for MinT, and tasks, that only the tests use (the shipped fake is `mathrl_fakes`).

- `fake_mint`: the mint SDK's client surface in process (`FakeMintServer`),
  for driving `mathrl.service.mint_backend` offline.
- `fake_mint_http`: the MinT REST API on a loopback port (`FakeMintHTTP`),
  for driving the real SDK over HTTP, outages included.
- `secret_game`: a game whose problems share one prompt (the secret is in the
  problem), importable by module name, as `check_adapter`'s new interpreter needs.
"""
