"""The HTTP client under :class:`~airflow_provider_crew.hooks.crew.CrewHook`; nothing else uses it.

- :mod:`.request`: a request of the contract as a :class:`~.request.Call` (URL, headers, what its
  failure means), and the two status paths;
- :mod:`.transport`: one attempt of a call, sync (``requests``) or async (``aiohttp``, one session
  per event loop);
- :mod:`.limits`: what one attempt may cost, and reading a body under its size cap;
- :mod:`.redirects`: which redirects are followed;
- :mod:`.retry`: the POST and GET rules as tables, the one decision after each attempt that reads
  them (wait and repeat, the answer, or the error), and the sync and async loops;
- :mod:`.response`: an answer read into the contract's models, or into a typed error; the two-path
  status read that both loops drive.
"""
