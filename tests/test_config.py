"""build_config: precedence, validation and limits, without a subprocess."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies as st_
from conftest import examples
from mathrl.cli.settings import (
    BY_FIELD,
    SETTINGS,
    FakeOptions,
    api_key,
    base_url,
    build_config,
    fake_options,
    wording,
)
from mathrl.config import DEFAULTS, LOSS_FIELDS, TRAIN_FIELDS, Config, ConfigError, TrainConfig
from mathrl.losses import PARAMETERS, Loss
from mathrl.text import apart, listed, one_line, shown, shown_end

NO_FLAGS: dict[str, str | None] = {}


def test_defaults_are_the_seed_pages() -> None:
    config = build_config(NO_FLAGS, {})
    assert config == Config()
    train = config.train
    assert (config.base_model, config.lora_rank, train.steps, train.batch) == (
        "Qwen/Qwen3-0.6B", 16, 5, 10
    )  # fmt: skip
    assert (train.group, train.lr, train.temperature) == (4, 1e-4, 1.0)
    assert train.max_tokens is None  # the task's: 8 for addition, the seed's MINT_RL_MAX_TOKENS
    assert (config.call_timeout, config.retries, train.save_every, train.eval_every) == (
        600.0, None, 5, 0
    )  # fmt: skip
    # A failing call is retried for ten minutes, with backoff capped at 30 s; no count cap.
    assert (config.retry_window, config.retry_delay) == (600.0, 1.0)


@given(flag=st_.counts, env=st_.counts)
def test_flag_beats_environment(flag: int, env: int) -> None:
    assert build_config({"steps": str(flag)}, {"MINT_RL_STEPS": str(env)}).train.steps == flag
    assert build_config(NO_FLAGS, {"MINT_RL_STEPS": f" {env} "}).train.steps == env


def _build_from(setting_index: int, raw: str) -> Config:
    setting = SETTINGS[setting_index]
    if setting.env:
        return build_config(NO_FLAGS, {setting.env: raw}, backend="fake")
    return build_config({setting.field: raw}, {}, backend="fake")


@settings(max_examples=examples(25, 100))  # long texts: 50 ms an example under coverage
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
    if SETTINGS[index].field in LOSS_FIELDS[1:] and message.startswith(f"{source} applies"):
        # A valid value of a loss's setting, given alone, with a loss that takes no such
        # setting (the default): refused for that, naming both.
        assert message.endswith("loss only (got --loss importance_sampling)")
        return
    assert not message or message == (
        f"{source} must be {SETTINGS[index].requirement} (got {SETTINGS[index].rule.quote(raw)})"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MINT_RL_BATCH": "99999999999999999999"},
         "MINT_RL_BATCH must be an integer from 1 to 32,768"),
        ({"MINT_RL_GROUP": "70000"}, "MINT_RL_GROUP must be an integer from 2 to 65,536"),
        ({"MINT_RL_MAX_TOKENS": "32769"}, "MINT_RL_MAX_TOKENS must be an integer from 1 to 32,768"),
        ({"MINT_RL_BATCH": "1000", "MINT_RL_GROUP": "100"},
         "MINT_RL_BATCH x MINT_RL_GROUP must be at most 65,536 completions a step "
         "(got 1,000 x 100 = 100,000)"),
        ({"MINT_RL_BATCH": "20000"}, "MINT_RL_BATCH x group must be at most 65,536"),
        ({"MINT_RL_STEPS": "1" * 5000}, "(5,000 characters)"),
    ],
)  # fmt: skip
def test_limits_keep_a_typo_from_eating_the_machine(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        build_config(NO_FLAGS, env)
    assert message in str(excinfo.value)
    assert len(str(excinfo.value)) < 200  # long values are cut short


def test_shown_cuts_long_values() -> None:
    # 40 characters, then the length: enough to recognise, never a screenful.
    assert shown("x" * 5000) == repr("x" * 40) + "... (5,000 characters)"
    assert shown("short") == "'short'"
    # Undecodable bytes (U+FFFD) are escaped, and escapes count: 6 of them fit in 40.
    assert shown("\ufffd" * 10) == "'" + "\\ufffd" * 6 + "'... (10 characters)"


@given(st_.unicode_text, st.integers(min_value=1, max_value=100))
def test_shown_is_one_printable_line_near_its_limit(text: str, limit: int) -> None:
    line = shown(text, limit)
    assert line.isprintable()
    assert "\ufffd" not in line
    note = f"... ({len(text):,} characters)"
    assert len(line) <= limit + 2 + len(note)  # the quotes, and the length of what was cut


@given(st_.unicode_text, st.integers(min_value=0, max_value=60))
def test_shown_keeps_the_longest_start_that_fits(text: str, limit: int) -> None:
    # The naive rule, escaping every start of the text in turn: `shown` escapes only the
    # first `limit + 2` characters once runs of spaces are one, and must agree with it.
    starts = [text[:n] for n in range(len(text), -1, -1)]
    fits = [s for s in starts if len(one_line(repr(s), 10 * len(text) + 2)) <= limit + 2]
    if fits and fits[0] == text:
        assert shown(text, limit) == one_line(repr(text), 10 * len(text) + 2)
    else:
        kept = one_line(repr(fits[0]), 10 * len(text) + 2)
        assert shown(text, limit) == f"{kept}... ({len(text):,} characters)"


def test_shown_end_keeps_the_end_of_a_long_value() -> None:
    # 100 characters: '...', then the last 40 quoted (42 with the quotes), then the length.
    assert shown_end("a" * 60 + "b" * 40) == "..." + repr("b" * 40) + " (100 characters)"
    assert shown_end("path/task.py") == "'path/task.py'"


@given(st_.unicode_text, st.integers(min_value=0, max_value=60))
def test_shown_end_keeps_the_longest_end_that_fits(text: str, limit: int) -> None:
    # The naive rule, escaping every end of the text in turn, longest first.
    squeezed = re.sub(" +", " ", text)
    ends = [squeezed[n:] for n in range(len(squeezed) + 1)]
    fits = [e for e in ends if len(one_line(repr(e), 10 * len(text) + 2)) <= limit + 2]
    kept = one_line(repr(fits[0]), 10 * len(text) + 2)
    line = shown_end(text, limit)
    assert line == (kept if fits[0] == squeezed else f"...{kept} ({len(text):,} characters)")
    assert line.isprintable()


@given(st_.words)
def test_a_list_in_a_message_reads_as_a_sentence(words: list[str]) -> None:
    # "a", "a or b", "a, b or c": the words come back in order, split where they were joined.
    assert re.split(r", | or ", listed(words, "or")) == words


def test_a_list_in_a_message_worked_examples() -> None:
    assert listed(["dro"], "or") == "dro"
    assert listed(["ppo", "cispo"], "or") == "ppo or cispo"
    assert listed(["ppo", "cispo", "capped"], "and") == "ppo, cispo and capped"


def test_each_loss_setting_is_a_train_config_field_and_a_flag_and_a_variable() -> None:
    # The flags and variables of before, now spelled from `mathrl.losses.PARAMETERS`.
    assert [(p.field, BY_FIELD[p.field].flag, BY_FIELD[p.field].env) for p in PARAMETERS] == [
        ("clip_low", "--clip-low", "MINT_RL_CLIP_LOW"),
        ("clip_high", "--clip-high", "MINT_RL_CLIP_HIGH"),
        ("dro_beta", "--dro-beta", "MINT_RL_DRO_BETA"),
    ]
    assert all(p.field in TRAIN_FIELDS and DEFAULTS[p.field] is None for p in PARAMETERS)
    config = build_config({"clip_high": "1.5"}, {"MINT_RL_LOSS": "cispo"})
    assert config.train.loss_fn == Loss("cispo", clip_high=1.5)


def test_empty_model_name_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"MINT_BASE_MODEL must be a model name .*\(got ' '\)"):
        build_config(NO_FLAGS, {"MINT_BASE_MODEL": " "})


def test_a_config_built_by_hand_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"^TrainConfig.group must be an integer from 2"):
        TrainConfig(group=1)
    with pytest.raises(ConfigError, match=r"^TrainConfig.batch x TrainConfig.group must be"):
        TrainConfig(batch=30_000, group=4)
    with pytest.raises(ConfigError, match=r"^Config.backend must be 'mint' or 'fake'"):
        Config(backend="gpu")
    with pytest.raises(ConfigError, match=r"^TrainConfig.eval_k must be comma-separated integ"):
        TrainConfig(eval_k=(0, 4))
    with pytest.raises(ConfigError, match=r"^TrainConfig.eval_k must be .*\(got \(1.5,\)\)"):
        TrainConfig(eval_k=(1.5,))  # type: ignore[arg-type]  # what the rule is there for
    with pytest.raises(ConfigError, match=r"^TrainConfig.eval_problems x the largest of Train"):
        TrainConfig(eval_every=1, eval_problems=1000, eval_k=(100,))


def test_eval_k_is_kept_sorted_once_each_as_a_tuple() -> None:
    # As a run's config.json gives it back: a list.
    assert TrainConfig(eval_k=[16, 1, 4, 4]).eval_k == (1, 4, 16)  # type: ignore[arg-type]  # JSON gives a list
    assert build_config({"eval_k": " 4,1 "}, {}).train.eval_k == (1, 4)
    assert build_config(NO_FLAGS, {"MINT_RL_EVAL_K": "2"}).train.eval_k == (2,)
    assert TrainConfig().eval_k == ()


def test_the_fakes_knobs_are_the_fakes_alone() -> None:
    assert "fake_latency" not in Config.__dataclass_fields__
    flags: dict[str, str | None] = {"fake_latency": "0.5", "fake_fault_rate": "0.25"}
    assert fake_options(flags, "fake") == FakeOptions(fake_latency=0.5, fake_fault_rate=0.25)
    assert fake_options(NO_FLAGS, "mint") == FakeOptions()
    with pytest.raises(
        ConfigError,
        match=r"^--fake-fault-rate and --fake-latency work only with --backend fake \(got "
        r"--backend mint\)$",
    ):
        fake_options(flags, "mint")
    with pytest.raises(ConfigError, match=r"^--fake-fault-rate must be a number >= 0 and <= 1"):
        fake_options({"fake_fault_rate": "2"}, "fake")
    # The fake's knobs never become part of the config, whatever build_config is given.
    assert build_config(flags, {}, backend="fake") == Config(backend="fake")


def test_library_errors_name_settings_the_command_line_spells() -> None:
    # A library error names settings by field; the command line words them as it spells them.
    assert wording(["call_timeout", "retries"]) == "MINT_CALL_TIMEOUT, --call-timeout, " + (
        "MINT_RL_RETRIES, --retries"
    )
    assert wording(["base_url", "seed"]) == "MINT_BASE_URL, --seed"


def test_only_reads_the_settings_named() -> None:
    env = {"MINT_RL_STEPS": "oops", "MINT_RL_BATCH": "3"}
    assert build_config(NO_FLAGS, env, only=["batch"]).train.batch == 3
    with pytest.raises(ConfigError, match="MINT_RL_STEPS"):
        build_config(NO_FLAGS, env)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "MINT_API_KEY must be set to a MinT API key (got nothing)"),
        ("  \t", "MINT_API_KEY must be set to a MinT API key (got nothing)"),
        ("abc", "MINT_API_KEY must be a MinT key: 'sk-' then the rest, with no spaces "
                "(got a 3-character value that is not; it is not shown)"),
        (" sk-x", "(got a 5-character value that is not; it is not shown)"),
        ("sk-a b", "(got a 6-character value"),
    ],
)  # fmt: skip
def test_the_api_key_is_checked_and_never_echoed(key: str, message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        api_key({"MINT_API_KEY": key})
    assert message in str(excinfo.value)
    assert key.strip() == "" or key.strip() not in str(excinfo.value)
    assert api_key({"MINT_API_KEY": "sk-good"}) == "sk-good"


@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://", "http://host:0", "http://a b"])
def test_a_malformed_base_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^MINT_BASE_URL must be an http:// or https:// URL"):
        base_url({"MINT_BASE_URL": url})


def test_a_port_out_of_range_is_named_as_the_port() -> None:
    with pytest.raises(ConfigError) as excinfo:
        base_url({"MINT_BASE_URL": "http://127.0.0.1:99999"})
    assert str(excinfo.value) == (
        "MINT_BASE_URL's port must be a number from 1 to 65,535 (got '99999' in "
        "'http://127.0.0.1:99999')"
    )


def test_good_base_urls_pass() -> None:
    assert base_url({}) == "https://mint.macaron.xin"
    assert base_url({"MINT_BASE_URL": "http://127.0.0.1:8000/api"}) == "http://127.0.0.1:8000/api"


def test_apart_quotes_two_texts_where_they_differ() -> None:
    # They agree on 30 characters: both are quoted from the 20th, 10 before the difference.
    first, second = "x" * 30 + "12 + 30?", "x" * 30 + "45 + 7?"
    assert apart(first, second) == (
        "..." + repr("x" * 10 + "12 + 30?"),
        "..." + repr("x" * 10 + "45 + 7?"),
    )
    assert apart("ab", "ac") == ("'ab'", "'ac'")  # a difference near the start: all of them


@given(st_.unicode_text, st_.unicode_text, st_.unicode_text)
def test_apart_shows_where_two_texts_differ(same: str, first: str, second: str) -> None:
    # Whatever they share first, what follows the shared part shows in both quotes (at most
    # 10 shared characters come first, each at most 10 once escaped: a limit of 120 holds them).
    ours, theirs = apart(same + "A" + first, same + "B" + second, 120)
    assert ours.isprintable()
    assert theirs.isprintable()
    assert ours != theirs  # the difference is in the window
    assert "A" in ours
    assert "B" in theirs


def test_each_setting_is_described_once_and_help_and_docs_say_it() -> None:
    # The description is the field's (`mathrl.config.setting`): --help shows it, and the class's
    # docstring lists it with its default, so neither can say something else.
    from mathrl.cli.parsers import train_parser
    from mathrl.cli.settings import SETTINGS
    from mathrl.config import description

    shown = " ".join(train_parser().format_help().split())
    for s in SETTINGS:
        said = description(s.owner, s.field)
        assert s.help_text == said
        assert " ".join(said.split()) in shown, s.flag
        if s.owner in (TrainConfig, Config):
            assert f"    {s.field} (" in (s.owner.__doc__ or "")
            assert said in (s.owner.__doc__ or "")


def test_a_repeated_default_is_one_named_constant() -> None:
    from mathrl.config import CALL_TIMEOUT, FILL_BATCH_CAP, RETRY_DELAY, RETRY_WINDOW
    from mathrl.rollout import drawn_per_step
    from mathrl.service.retry import RetryPolicy
    from mathrl.workers import DEFAULT_TIMEOUT, Workers

    config, policy = Config(), RetryPolicy()
    assert (config.call_timeout, config.retry_delay, config.retry_window) == (
        CALL_TIMEOUT, RETRY_DELAY, RETRY_WINDOW
    )  # fmt: skip
    assert (policy.call_timeout, policy.delay, policy.window) == (
        CALL_TIMEOUT, RETRY_DELAY, RETRY_WINDOW
    )  # fmt: skip
    assert config.reward_timeout == Workers(1).timeout == DEFAULT_TIMEOUT
    assert drawn_per_step(TrainConfig(batch=3, fill_batch=True)) == FILL_BATCH_CAP * 3
    assert f"at most {FILL_BATCH_CAP} x batch" in TrainConfig.__doc__  # type: ignore[operator]
