"""Procedural reasoning tasks from reasoning-gym (an optional extra): see `task.py`.

What works, as tests/bench/survey_reasoning_gym.py found it for reasoning-gym 0.1.25 (each
dataset at its default settings): 88 of the 106 datasets pass `check_adapter` and
learn on the fake (training accuracy up 25 to 55 points in 20 steps). The task
refuses 12 (`settings.REFUSED`: 9 whose scorer runs the answer as Python, 3 whose
questions change from one process to the next), and `composite` needs a list of
dataset specs, which options cannot give. Five datasets have no reference answer
(their scorer simulates the answer: boxnet, graph_color, propositional_logic,
rubiks_cube, rush_hour): a real model can train on them, the fake cannot, so they fail
`check_adapter`. Some draw slowly (futoshiki and knight_swap take about half a second
a problem, and a held-out set draws ten problems for each it keeps), and the longest
references of tower_of_hanoi and palindrome_partitioning exceed `max_tokens` on the
fake, which counts bytes.
"""

from mathrl.tasks.reasoning_gym.task import ReasoningGym

__all__ = ["ReasoningGym"]
