"""The rules of waiting for a crew execution, without I/O and without the task's side of Airflow.

- :mod:`.rules`: how one poll's result ends a wait (or not), the poll schedule, the trigger's event.
  The trigger, the blocking wait and the sensor's ``poke`` all step through :class:`~.rules.Poller`.
- :mod:`.stopping`: when an execution nobody waits for is stopped, and the one stop every caller uses.
- :mod:`.xcom`: what a wait's end pushes to XCom; every XCom key's name.
- :mod:`.race`: Airflow's stale executor-event race, in one place.

The wait as a task runs it (read once, defer or poll, XCom or an error) is
:mod:`airflow_provider_crew.operators.wait`.
"""
