"""Waiting for a crew execution, in one place.

- :mod:`.rules`: how one poll's result ends a wait (or not), the poll schedule, the trigger's
  event; no I/O. The trigger, the worker and the sensor's ``poke`` all follow them.
- :mod:`.task`: the wait as a task runs it (:class:`~.task.CrewWaitMixin`): read once, then defer
  to the trigger or poll in the worker, and turn the outcome into XCom values or an error.
"""
