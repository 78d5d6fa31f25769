"""The HTTP client under :class:`~airflow_provider_crew.hooks.crew.CrewHook` (docs/architecture.md)."""
