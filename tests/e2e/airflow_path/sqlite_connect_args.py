"""SQLite connection arguments for a test Airflow under load (``[database] sql_alchemy_connect_args``).

Used by the fault suite and the webhook wake's soak.

Python's sqlite3 gives up on a locked database after 5 s. A hundred task processes reporting to
one api-server keep the database locked longer than that, and a component whose write gives up
exits ("database is locked"): wait up to 30 s instead, as a server database would queue the write.
"""

CONNECT_ARGS = {"timeout": 30}
