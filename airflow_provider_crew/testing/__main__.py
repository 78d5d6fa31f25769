"""``python -m airflow_provider_crew.testing serve ...``: same as the ``crew-service`` script."""

import sys

from .cli import main

sys.exit(main())
