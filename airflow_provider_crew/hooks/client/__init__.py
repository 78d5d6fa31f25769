"""The HTTP client under :class:`~airflow_provider_crew.hooks.crew.CrewHook`; nothing else uses it.

docs/architecture.md gives each module's part: a request is built (:mod:`.request`), sent one attempt
at a time (:mod:`.transport`) under the one retry decision (:mod:`.retry`), and what came back is
classified and read (:mod:`.response`).
"""
