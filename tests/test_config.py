"""build_config: precedence and validation, without a subprocess."""

from __future__ import annotations

import pytest
from hypothesis import given

import strategies as st_
from mathrl.config import SETTINGS, Config, ConfigError, build_config

NO_FLAGS: dict[str, str | None] = {}


def test_defaults_are_the_seed_pages() -> None:
    config = build_config(NO_FLAGS, {})
    assert config == Config()
    assert (config.base_model, config.lora_rank, config.steps, config.batch) == (
        "Qwen/Qwen3-0.6B", 16, 5, 10
    )  # fmt: skip
    assert (config.group, config.lr, config.max_tokens, config.temperature) == (4, 1e-4, 8, 1.0)


@given(flag=st_.counts, env=st_.counts)
def test_flag_beats_environment(flag: int, env: int) -> None:
    assert build_config({"steps": str(flag)}, {"MINT_RL_STEPS": str(env)}).steps == flag
    assert build_config(NO_FLAGS, {"MINT_RL_STEPS": f" {env} "}).steps == env


def _build_from(setting_index: int, raw: str) -> Config:
    setting = SETTINGS[setting_index]
    if setting.env:
        return build_config(NO_FLAGS, {setting.env: raw})
    return build_config({setting.field: raw}, {})


@given(st_.setting_indices, st_.raw_setting_values)
def test_a_bad_value_names_its_source_and_never_escapes_as_another_error(
    index: int, raw: str
) -> None:
    # Any text either parses into a valid Config or raises ConfigError naming the source.
    source = SETTINGS[index].env or SETTINGS[index].flag
    message = ""
    try:
        _build_from(index, raw)
    except ConfigError as exc:
        message = str(exc)
    assert not message or message == (
        f"{source} must be {SETTINGS[index].requirement} (got {raw!r})"
    )


def test_empty_model_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"MINT_BASE_MODEL must be a model name \(got ' '\)"):
        build_config(NO_FLAGS, {"MINT_BASE_MODEL": " "})


def test_a_config_built_by_hand_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"^Config.group must be an integer >= 2 \(got 1\)$"):
        Config(group=1)
    with pytest.raises(ConfigError, match=r"^Config.backend must be 'mint' or 'fake'"):
        Config(backend="gpu")


def test_only_reads_the_settings_named() -> None:
    env = {"MINT_RL_STEPS": "oops", "MINT_RL_BATCH": "3"}
    assert build_config(NO_FLAGS, env, only=["batch"]).batch == 3
    with pytest.raises(ConfigError, match="MINT_RL_STEPS"):
        build_config(NO_FLAGS, env)
