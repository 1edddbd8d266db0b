"""Procedural reasoning tasks from reasoning-gym (an optional extra): see `task.py`."""

from mathrl.tasks.reasoning_gym.task import ReasoningGym

__all__ = ["ReasoningGym"]
