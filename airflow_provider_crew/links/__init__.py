"""Operator extra links: from a crew task in the Airflow UI to the execution in the crew's dashboard."""
