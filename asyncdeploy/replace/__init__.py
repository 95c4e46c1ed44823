"""Replacing a workload: a new instance of its plan, the old one drained, one at a time.

- ``_run``: a replace from start to end (surge or recreate, the roll-back), as events;
- ``_strategy``: surge or recreate, and why, said before anything is touched;
- ``_lock``: one replace at a time per plan (a marker the engine or the API server holds);
- ``_names``: what a plan's name means once it has instances (the current one);
- ``events``: the strategy chosen and the replace's own event types.

The drivers' side of a replace, a ``create`` draining the workload it replaces, is
``drivers/_replaced.py``: it sits below this package, which the drivers never import.
"""
