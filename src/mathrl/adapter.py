"""The task adapter: the contract a new RL task is written from.

An adapter turns a seed and a step into problems, a problem into a prompt,
and a completion into a reward. The loop never looks inside a problem. Five
methods are required (`Adapter`); the optional members below each have a
documented default, which `mathrl.resolved.as_task` fills in. An adapter
written to the first contract (five methods, text prompts, one reward per
completion) works unchanged. `mathrl.tasks` holds the built-in tasks and
`mathrl.testing.check_adapter` checks any task from the outside.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, TypeVar

ProblemT = TypeVar("ProblemT")

DEFAULT_STOP: tuple[str, ...] = ("\n",)
"""Stop sequences of a text task that declares none: its answer is one line."""
DEFAULT_MAX_TOKENS = 32
"""Token budget of a completion for a task that declares none."""
HELDOUT_STEP = 0
"""The step whose problems are a task's default held-out set (training uses 1, 2, ...)."""
EVAL_STEP = -1
"""The `step` in evaluation requests' sampling seeds: no training step has it."""

Message: TypeAlias = Mapping[str, str]
"""One turn of a conversation: `{"role": "system" | "user" | "assistant", "content": text}`."""
Prompt: TypeAlias = str | Sequence[Message]
"""Text the model continues, or a conversation the model's chat template renders."""
Ending = Literal["stop", "end_of_turn", "end_of_sequence", "length"]
"""How sampling ended a completion: at one of the task's stop sequences, at the chat
template's end-of-turn token, at the end-of-sequence token, or at the token limit."""
Reward: TypeAlias = float | Mapping[str, float]
"""A reward: a number, or named parts (`{"correct": 1.0, "format": 0.25}`) whose sum the
loop trains on; each part's mean is recorded."""
Metrics: TypeAlias = Mapping[str, float]
"""Named numbers about a completion that do not count in its reward (`{"tokens": 37,
"solved_on_turn": 3}`): finite, with True and False counting as 1 and 0."""


class AdapterError(TypeError):
    """An object is not a usable adapter. The message names the member and what it got."""


class OptionError(ValueError):
    """A task's constructor was given an option it cannot use.

    `option` names the option; the message is one line saying what it must
    be and what it got, e.g. `few_shot must be an integer from 0 to 8 (got 12)`.
    The command line adds how the option was given.
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


class Unavailable(Exception):
    """A task's `preflight` found this machine cannot run it as it promises.

    The message is one line: what is missing and how to get it.
    """


class NoReference(Exception):
    """A task has no reference completion for a problem: its reward needs no answer to write.

    The message is one line saying why, e.g. `the dataset task was given no answer field`.
    """


class Response(str):
    """A decoded completion, as a reward sees it: its text, and how sampling ended it.

    It is a `str`, so a reward written for plain text works unchanged. The
    text keeps the stop sequence that ended it (and nothing after it), and
    never holds an end-of-turn or end-of-sequence marker. `ended` says how it
    ended; `stop` is the stop sequence, when one did; `turn` is which of the
    model's turns of an episode it is (1 for the first, and for every
    completion of a one-turn task).

    `tokens` is how many tokens sampling drew for it: every token of this
    turn, the stop sequence's among them and the end-of-turn or
    end-of-sequence token that ended it (which the text leaves out), so a
    completion cut off at the token limit (`ended == "length"`) has exactly
    its turn's budget. Count length in tokens with it, not in characters.
    `mathrl.testing.check_adapter` counts the texts it makes up on the
    tokenizer it checks with; a `Response` built by hand has 0 unless given.
    """

    ended: Ending
    stop: str | None
    turn: int
    tokens: int

    def __new__(
        cls,
        text: str,
        ended: Ending = "end_of_sequence",
        stop: str | None = None,
        turn: int = 1,
        tokens: int = 0,
    ) -> Response:
        self = super().__new__(cls, text)
        self.ended, self.stop, self.turn, self.tokens = ended, stop, turn, tokens
        return self

    @property
    def text(self) -> str:
        """The plain text, without the stop sequence that ended it."""
        return str(self)[: len(self) - len(self.stop)] if self.stop else str(self)


@dataclass(frozen=True, slots=True)
class Feedback:
    """What an episode's environment says after one of the model's turns.

    `reply`: the environment's turn (tool output, test results, a remark),
    after which the model takes another turn; None ends the episode. For a
    text prompt the reply is text appended to the context as it is; for a
    conversation it is a message of `role` in the chat template. `reward`:
    this turn's reward (a number or named parts), added to the episode's.
    `metrics`: named numbers about the episode so far that do not count in
    its reward (see `Adapter`'s `metrics`); the episode keeps, for each name,
    the value of the latest turn that reported it, so report a running count
    (feedback sees every turn) rather than this turn's increment.

    `stop` and `max_tokens` set the limits of the model's next turn, and of
    that turn only (as tinker's `Env.step` returns the next stop condition);
    None keeps the defaults: the task's `stop`, the run's max_tokens.
    `stop`: a tuple of non-empty strings that end the next turn instead
    (`()`: none, so it ends at end-of-sequence, or end-of-turn for a
    conversation); that turn's `Response.stop` is the one that ended it.
    `max_tokens`: an integer >= 1, the next turn's budget instead; the turn
    gets the smaller of it and what is left of `episode_tokens` (a run caps
    it there quietly; `check_adapter` reports one above `episode_tokens`,
    which cannot be what the task meant). A run ends on an invalid limit (a
    `stop` that is not a tuple of non-empty strings, a `max_tokens` below 1),
    with one line naming the task and the turn; `check_adapter` reports one
    too, and a reference turn (`reference_turn`) that holds one of its turn's
    stops or needs more tokens than its turn's budget.
    """

    reply: str | None = None
    reward: Reward = 0.0
    role: str = "user"
    stop: tuple[str, ...] | None = None
    max_tokens: int | None = None
    metrics: Metrics = field(default_factory=dict)


class Adapter(Protocol[ProblemT]):
    """A task, as the GRPO loop sees it (the seed's `RLAdapter`, typed).

    Required: the five methods below. Every one is pure: the same arguments
    give the same result, in any process, whatever else has run before.

    Optional members, each with the default the loop uses when it is absent:

    - `name: str`: a stable id for the task, 1 to 64 characters from
      `A-Z a-z 0-9 _ . -`, starting with a letter or digit. It starts every
      checkpoint name and is written into every run record. Default: the class
      name (characters outside that set become `-`).
    - `version: str`: part of the checkpoint names' fingerprint. Default: a
      hash of the source of the module that defines the adapter (and of its
      bases'), so editing the task gives its runs new checkpoint names instead
      of overwriting the old ones.
    - `stop: tuple[str, ...]`: sampling stops after any of these strings, and
      always after the end-of-sequence (and, for a conversation, end-of-turn)
      token. Default: `("\\n",)` for text prompts (the answer is one line), `()`
      for conversations (the answer is the assistant's turn).
    - `max_tokens: int`: the default budget of tokens per completion (the
      run's `TrainConfig.max_tokens` overrides it). Default 32.
    - `chat_template_options: Mapping[str, object]`: keyword arguments for the
      model's chat template, e.g. `{"enable_thinking": False}` for Qwen3.
      Default: none.
    - `heldout_dataset(seed, size) -> list[problem]`: `size` problems for
      evaluation that training never draws, for any step. Default:
      `build_dataset(seed, 0, size)`; in a small problem space those can repeat
      training problems, which the loop then leaves out of evaluation (and
      says so), so declare `heldout_dataset` to keep them truly apart.
    - `compute_group_rewards(responses, problem) -> Sequence[Reward]`, plain or
      `async` (a judge may call a model or a service): score a whole group at
      once, e.g. each completion's win rate against the others. It replaces
      `compute_reward` in training and evaluation (where a group has one
      member). Shuffling the group must shuffle its rewards alike.
    - `mask_truncated: bool`: train on nothing a completion wrote before it hit
      the token limit (as TRL's `mask_truncated_completions`); its reward still
      counts towards its group's mean. Default False (the command line's
      `TrainConfig.mask_truncated` turns it on for any task).
    - `wrong_completions(problem) -> Sequence[str]`: plausible wrong answers,
      which the fake backend writes instead of the reference now and then, so
      partial credit and format rewards show offline. Default: none.
    - `final_answer(completion) -> str | None`: the final answer a completion
      names, written the same way whenever it is the same answer (`"72"`,
      never `"72.0"` for one sample and `"72"` for another), or None when it
      names none. Evaluation counts the answers of a problem's samples for
      maj@k, the share of k samples whose most named answer is right
      (`mathrl.passk.majority_at_k`). Like a reward, it reads untrusted text
      and must never raise; it runs in a worker. Default: none (the task
      names no answers, and evaluation reports no maj@k).
    - `metrics(completion, problem) -> Mapping[str, float]`: named numbers
      about a completion that do not count in its reward, to watch a run by:
      its length (`completion.tokens`), the facts it kept, the turn a game
      was won on (`completion.turn`). Called on every completion (an
      episode's last response) in training and evaluation, in a worker, like
      `compute_reward`: it reads untrusted text, must be pure and must never
      raise; values are finite numbers (True and False count as 1 and 0), and
      a completion may leave a name out. One that raises or returns what is
      not metrics stops the run as a failing reward does. An episode's
      metrics are its `Feedback.metrics` (each name's latest), then these,
      which win. Each name's mean over the completions that report it is
      recorded per step and per evaluation (`metric/NAME` in metrics.jsonl,
      `train/metric/NAME` in W&B) and drawn by `plot`; each completion's go
      into samples.jsonl. Default: none.

    - `options: Mapping[str, str | int | float | bool]`: the settings the task
      was built with, by name. A task with settings takes each as a keyword
      argument of its constructor, with a default, a type annotation (str,
      int, float or bool) and a line in the constructor's `Args:` docstring,
      checks them there (raising `OptionError`), and keeps those it was given
      (or all of them) here. They go into the run record and the checkpoint
      names' fingerprint, and a resumed run builds the task again with them;
      the command line gives them as `NAME=VALUE` texts. Default: none.
    - `preflight() -> str | None`: check, once before training (and in
      `check_adapter`), that this machine can run the task as it promises:
      return one line saying what the task relies on (the command line prints
      it on stderr and records it in the run folder's config.json), or None.
      Raise `Unavailable` with one line naming what is missing and how to get
      it; the run then stops before training, with exit code 2. Default: None.

    Data (a task that reads files: `mathrl.tasks.dataset` does all of this for
    its rows, and the `dataset` and `math` tasks use it):

    - `data: Mapping[str, str]`: each source of data the task reads, by a name
      (the option that names the file, say `train`), to a digest of its
      content (`mathrl.tasks.dataset.sources.Source.digest`: a hash of a
      file's bytes). The digests are part of the run's identity: a changed
      file gives new checkpoint names (where a name is also one of `options`,
      the digest stands for the option's value, so the same data under
      another path trains alike). The run folder records them, and
      `--resume`, `eval` and `sample` of a run folder refuse, in one line
      naming the source, to go on when the data is not what the run trained
      on. Record paths in `options` absolute, so a run folder works from any
      folder. Default: none (the task's code is its data).
    - `prepare(tokenizer, max_tokens) -> str | None`: called once, with the
      model's tokenizer and the run's token budget, before any problem is
      drawn or any request sent (the command line, `run_grpo` and
      `check_adapter` call it; a second call with the same budget does
      nothing new). Check what needs the tokenizer, such as every reference
      fitting `max_tokens` (raise `OptionError` naming the row and the
      option), or leave out the problems that cannot be used if the task was
      told to; return one line on the task's data (printed on stderr and
      recorded like preflight's), or None. Default: nothing to prepare.
    - `cut_off_graded: str`: why a completion cut off at the token limit
      still earns its reward on this task (the seed's addition task grades
      the digits written so far, as the seed did): `check_adapter` then does
      not warn that a completion that ran out of tokens earns full reward.
      Default: none (the warning stands).

    A task without references (rewards from a judge, a rubric or any
    function, with no answer to write) raises `NoReference` from
    `reference_completion` (and `reference_turn`). It trains on MinT and
    runs in `eval`; `check_adapter` says in one line which checks need a
    reference and skips them, and the fake backend, which learns to write
    references, refuses to train it.

    Episodes (several turns; a task without `feedback` is an episode of one turn):

    - `feedback(problem, responses) -> Feedback`: called after each of the
      model's turns with all of them so far (`responses[-1]` is the latest,
      its `turn` is `len(responses)`): the environment's reply, or None to
      end the episode, and this turn's reward. It must be pure and must never
      raise, whatever the model wrote; it runs in a worker thread, so it may
      take time (run code, call a service). The episode's reward is the sum of
      every turn's `Feedback.reward` plus `compute_reward` (or
      `compute_group_rewards`) of its last response, so a task rewards at the
      end, per turn, or both.
    - `max_turns: int`: the model's turns per episode at most; the reply after
      the last one is never seen, so `feedback` should end the episode by
      then. Default 1 (more needs `feedback`).
    - `episode_tokens: int`: the most tokens an episode may add after its
      prompt, the model's and the environment's together; a turn's budget is
      the smaller of `max_tokens` (or the one its feedback sets,
      `Feedback.max_tokens`) and what is left, and the episode ends when
      nothing is. Default `2 * max_turns * max_tokens`.
    - `reference_turn(problem, responses) -> str`: the reference of the
      model's next turn after `responses` (and the environment's replies to
      them), for `check_adapter`'s reference episode and the fake backend's
      policy, which learns it. Default: `reference_completion(problem)`, the
      right answer once more.
    - `work_in_processes: bool`: run each `compute_reward`, plain
      `compute_group_rewards` and `feedback` call in a child process forked
      for it, for Python work that holds the interpreter's lock (its answer
      comes back pickled; what it changes stays in the child). Default False:
      worker threads. (Tool calls always run on threads: a tools object's
      state lives in this process.)

    Tools (`mathrl.tools` says how an episode calls them; a task with tools
    plays episodes, with or without `feedback`, and prompts with a conversation):

    - `tools`: the functions the model may call, each a plain function with
      type hints and a Google-style docstring (its schema comes from them;
      one it cannot come from is refused when the task is loaded); or a class
      whose public methods are the tools, of which each episode gets its own
      object, made with the problem (`Tools(problem)`, or `Tools()`) when the
      episode starts and closed (`close()`, if it has one) when it ends: what
      a tool keeps between calls lives there, never across episodes. A turn
      that calls a tool is answered by the tools (one `tool` message a call,
      no gradient) and the model goes on; a turn that calls none goes to
      `feedback`, or, without one, ends the episode. Each episode's metrics
      gain `tool_calls` and `failed_tool_calls`. Default: none.
    - `tool_format`: how the model writes calls, a name of
      `mathrl.tools.FORMATS` (`hermes`, Qwen3's, the default, or
      `llama3-json`) or a format object. References write their calls in it
      (`mathrl.tools.FORMATS[name].write`).
    - `calls_per_turn: int` (default 4), `calls_per_episode: int` (default
      8): the calls that run; those past a cap are answered with an error.
    - `call_seconds: float`: how long one call may take before it is
      answered with an error instead (its thread is given up). Default 30.
    - `max_turns` of a task with tools defaults to 4 (calls, then an answer).

    Step numbering: training step k (1, 2, ..., steps) calls
    `build_dataset(seed, k, batch)`; nothing calls it with a step below 1,
    except the default held-out set above.
    """

    def build_dataset(self, seed: int, step: int, size: int) -> list[ProblemT]:
        """Return exactly `size` problems for `step` of a run seeded with `seed`.

        Draw them from a private RNG derived from (seed, step), such as
        `random.Random(f"my-task/{seed}/{step}")`, never from the global
        `random` module, so a run replays exactly and a resumed run draws what
        the uninterrupted one would have. Different seeds or steps should give
        different problems.

        Problems may share a prompt (a game whose secret is in the problem):
        they are told apart by value (`mathrl.problem_keys`), so build them of
        plain data (numbers, strings, tuples, dicts, sets, dataclasses), and
        let the first turn's reference be what the prompt tells (the
        environment's replies tell the rest).
        """
        ...

    def make_prompt(self, problem: ProblemT) -> Prompt:
        """Return the text the model continues (any Unicode, not empty), or a conversation.

        A conversation is a list of `{"role", "content"}` messages. The
        backend's tokenizer renders it with the model's chat template and opens
        the assistant's turn (`add_generation_prompt=True`); sampling stops at
        the template's end-of-turn token, which the reward never sees.
        """
        ...

    def compute_reward(self, completion: Response, problem: ProblemT) -> Reward:
        """Score one completion: a finite float (or named finite parts), higher is better.

        `completion` is untrusted model output: any string at all. It is a
        `Response`: a `str` that also says how sampling ended it, so a task can
        require its closing sentinel (`completion.ended == "stop"`) or refuse
        answers cut off at the token limit (`"length"`). The reward must never
        raise, whatever the text. Partial credit is fine (the GRPO advantage is
        the reward minus its group's mean); the reference completion, ended the
        way the task asks, must earn the most. Never run the completion in this
        process: see `mathrl.tasks.code.sandbox`.
        """
        ...

    def reference_completion(self, problem: ProblemT) -> str:
        """Return the text the model should write before it stops: one that earns the most.

        Without a stop sequence: the reference ended the way the task asks
        (at its first stop sequence, or at end-of-turn for a conversation, or
        at end-of-sequence for a text task without stops) must earn the
        maximum reward, and the reference must not contain a stop sequence:
        leave it out (` 42` for a one-line answer), since sampling writes it
        (` 42\\n`), and the reward sees it at the end of the text and as
        `completion.stop`.
        The loop never uses it. `mathrl.testing` checks the reward against it,
        and the fake backend's policy learns to write it, end and all (as
        tinker-cookbook's `get_reference_answer`). A task that has none raises
        `NoReference` (see the class docstring's "A task without references").
        """
        ...

    def evaluate(self, rewards: Sequence[float]) -> float:
        """The share of completions that are correct, from their rewards: in [0, 1], 0 for none.

        Correct is a property of each reward alone (the reference's reward is
        correct), so `evaluate([r])` is 0 or 1 and `evaluate(rewards)` is the
        mean of those: for a task with partial credit, count the completions
        that earn full credit, never the mean reward.
        """
        ...
