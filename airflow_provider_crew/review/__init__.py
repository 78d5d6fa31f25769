"""Human review of a crew's work in Airflow's human-in-the-loop UI (Airflow 3.1+), in one package.

DAG code uses :func:`crew_human_review` (defined in :mod:`.group`, named here), which lays out a task
group of review rounds and a result task:

- :mod:`.round`: one round (wait for the crew's pause, ask the reviewer, send the answer);
- :mod:`.result`: the result task (wait for the end, return the kickoff id, push the output and
  every round's record);
- :mod:`.base`: what both share, with the one definition of their shared parameters;
- :mod:`.request`: what the reviewer reads (the request's text, the answer options);
- :mod:`.answer`: how a round waits for the answer (parking, or its trigger on 3.1-3.2) and reads it;
- :mod:`.record`: the round's typed records (the request, the round's record) and what it keeps in the
  task state store for a retry.
"""

from __future__ import annotations

from airflow_provider_crew.review.group import CrewReviewGroup, crew_human_review

__all__ = ["CrewReviewGroup", "crew_human_review"]
