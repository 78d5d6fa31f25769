"""TaskFlow decorators: ``@task.crew`` (registered through the provider info's ``task-decorators``)."""
