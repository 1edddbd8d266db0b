"""Tools in episodes: a task's typed Python functions, offered to the model and called for it.

A task lists its tools (`Adapter`'s `tools`): a list of functions, or a class whose
public methods are the tools, of which each episode gets an object of its own, made when
the episode starts (`Tools(problem)`, or `Tools()` for a constructor that takes nothing)
and closed when it ends (its `close()`, if it has one): what a tool keeps between calls
lives there, for one episode, never in the task or the module (`check_adapter` plays an
episode twice and compares). Each tool is a plain function with type hints and a Google
style docstring, from which its JSON schema comes (`schema`); one whose schema cannot be
derived is refused when the task is loaded, in one line.

How an episode goes (`mathrl.episodes`): the schemas go to the chat template
(`apply_chat_template(..., tools=...)`: the task's `chat_template_options` gain `tools`),
so the model sees them as it was trained to. After each of the model's turns, its calls
are read in its own format (`formats`: Hermes for Qwen3 by default, `tool_format`); a
turn that calls a tool is answered with one message a call (of the format's role: `tool`
for Hermes), whose tokens are the environment's, masked from training like any reply
(`mathrl.grpo.episode_datum`), and the model takes another turn. A turn without a call
ends the episode (or goes to the task's own `feedback`, if it has one). The calls of the
last turn (`max_turns`) are never run.

Nothing the model writes ends an episode: a call that cannot be read (bad JSON, no name),
names no tool, gives arguments that do not fit (an unknown or missing name, a wrong type),
raises, runs past its time limit (`call_seconds`, default 30 s), or goes past a cap
(`calls_per_turn`, 4; `calls_per_episode`, 8) is answered with `Error: ...`, and the
episode goes on. Each episode reports `tool_calls` (calls answered) and
`failed_tool_calls` (answered with an error) among its metrics.

A call runs on a worker thread of the run's pool (`mathrl.workers`), never on the event
loop; one past its time limit is given up (its thread too, as the pool gives up any late
call) and answered, and may still be running when its episode's tools object is closed: a
tool that can hang should bound its own work (the `python` tool's sandbox does). A tool
runs in the trainer's process: it is the task's code, and the model only gives its
arguments. Code the model wrote runs in the sandbox only (`mathrl.tasks.math_python`'s
`python` tool runs it with `mathrl.tasks.code.sandbox`).
"""

from mathrl.tools.formats import FORMATS, Call, Hermes, Llama3Json, ToolFormat
from mathrl.tools.schema import Tool, ToolError, checked_arguments, describe
from mathrl.tools.toolbox import (
    CALL_SECONDS,
    CALLS_PER_EPISODE,
    CALLS_PER_TURN,
    FAILED_TOOL_CALLS,
    TOOL_CALLS,
    TOOL_TURNS,
    Session,
    Toolbox,
    ToolCall,
    ToolFailed,
    refused,
    toolbox_of,
)

__all__ = [
    "CALLS_PER_EPISODE",
    "CALLS_PER_TURN",
    "CALL_SECONDS",
    "FAILED_TOOL_CALLS",
    "FORMATS",
    "TOOL_CALLS",
    "TOOL_TURNS",
    "Call",
    "Hermes",
    "Llama3Json",
    "Session",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolFailed",
    "ToolFormat",
    "Toolbox",
    "checked_arguments",
    "describe",
    "refused",
    "toolbox_of",
]
