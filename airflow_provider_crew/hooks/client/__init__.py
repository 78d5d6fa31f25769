"""The HTTP client under :class:`~airflow_provider_crew.hooks.crew.CrewHook`; nothing else uses it.

- :mod:`.request`: a request of the contract as a :class:`~.request.Call` (URL, headers, what its
  failure means), and the two status paths;
- :mod:`.transport`: one attempt of a call, sync (``requests``) or async (``aiohttp``, one session
  per event loop);
- :mod:`.limits`: what one attempt may cost, and reading a body under its size cap;
- :mod:`.redirects`: which redirects are followed;
- :mod:`.retry`: the retry policy (repeat the call, after how long, or stop) and the loops that drive it;
- :mod:`.response`: an answer read into the contract's models, or into a typed error.
"""
