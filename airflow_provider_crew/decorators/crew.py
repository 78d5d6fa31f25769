"""``@task.crew``: a TaskFlow function returns the crew's inputs; the task starts the crew and waits.

The task is a :class:`~airflow_provider_crew.operators.crew.CrewKickoffOperator` whose ``inputs`` come
from the function: the same parameters, the same return value (the kickoff id) and XComs. Airflow finds
the decorator through the provider info's ``task-decorators``; importing the operators does not import
this module.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attr
from airflow.providers.common.compat.sdk import (
    SET_DURING_EXECUTION,
    DecoratedOperator,
    context_merge,
    determine_kwargs,
)

from airflow_provider_crew._compat import TaskDecoratorBase
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.waiting.xcom import crew_output

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.bases.decorator import TaskDecorator

DECORATOR = "@task.crew"
#: The logger a ``@task.crew`` task logs under, below ``airflow.task.operators``: the kickoff
#: operator's, which it is, rather than this module's private class.
LOGGER_NAME = f"{CrewKickoffOperator.__module__}.{CrewKickoffOperator.__name__}"
# The next_kwargs key that carries the function's inputs through a deferral.
INPUTS_KWARG = "crew_inputs"


class _CrewDecoratedOperator(DecoratedOperator, CrewKickoffOperator):
    """A :class:`CrewKickoffOperator` whose inputs are what its TaskFlow function returns.

    :param python_callable: The decorated function; it returns the crew's inputs (a mapping).
    :param op_args: Positional arguments for the function (templated).
    :param op_kwargs: Keyword arguments for the function (templated).
    """

    template_fields: Sequence[str] = (
        *DecoratedOperator.template_fields,
        *CrewKickoffOperator.template_fields,
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **CrewKickoffOperator.template_fields_renderers,
    }
    custom_operator_name: str = DECORATOR

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        check_decorator_arguments(kwargs)
        kwargs.pop("multiple_outputs", None)
        kwargs.setdefault("logger_name", LOGGER_NAME)
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            inputs=SET_DURING_EXECUTION,
            multiple_outputs=False,  # the return value is the kickoff id, as for every crew task
            **kwargs,
        )

    def __repr__(self) -> str:
        """``<Task(@task.crew): research>`` in Airflow's own log lines, as the UI names the task."""
        return f"<Task({self.custom_operator_name}): {self.task_id}>"

    def _validate_inputs_shape(self) -> None:
        if self.inputs is SET_DURING_EXECUTION:  # at DAG parse: the function has not run yet
            return
        super()._validate_inputs_shape()

    def execute(self, context: Context) -> str:
        """Call the function (with ``op_args``, ``op_kwargs`` and the context keys it names), take the
        mapping it returns as the inputs, then start the crew and wait as the kickoff operator does."""
        context_merge(context, self.op_kwargs)
        kwargs = determine_kwargs(self.python_callable, self.op_args, context)
        returned = self.python_callable(*self.op_args, **kwargs)
        if not isinstance(returned, Mapping):
            name = getattr(self.python_callable, "__name__", repr(self.python_callable))
            raise CrewConfigurationError(
                f"{DECORATOR} function {name}() must return the crew's inputs, a mapping of input name to "
                f"value such as {{'topic': 'AI'}}; it returned {type(returned).__name__}: {returned!r:.200}. "
                "Nothing was started."
            )
        self.inputs = dict(returned)
        return CrewKickoffOperator.execute(self, context)

    def _resume_kwargs(self, kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """The function's inputs ride through a deferral: a worker that resumes the task rebuilds it
        without them, and OpenLineage's events always name them. Their values only when the lineage
        asks for them (``openlineage_include_values``): they may be private."""
        carried = super()._resume_kwargs(kwargs)
        if isinstance(self.inputs, Mapping):
            keep = self.openlineage_include_values
            carried[INPUTS_KWARG] = {name: value if keep else None for name, value in self.inputs.items()}
        return carried

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        if next_kwargs and INPUTS_KWARG in next_kwargs:
            next_kwargs = dict(next_kwargs)
            self.inputs = next_kwargs.pop(INPUTS_KWARG)
        return super().resume_execution(next_method, next_kwargs, context)


def check_decorator_arguments(kwargs: Mapping[str, Any]) -> None:
    """Refuse, at DAG parse, what ``@task.crew`` sets itself: ``inputs`` and ``multiple_outputs``."""
    if "inputs" in kwargs:
        raise CrewConfigurationError(
            f"{DECORATOR} takes the crew's inputs from what the function returns: drop inputs=..., or use "
            "CrewKickoffOperator(inputs=...)."
        )
    if kwargs.get("multiple_outputs"):
        raise CrewConfigurationError(
            f"{DECORATOR} returns the kickoff id, like every crew task, so multiple_outputs must stay False; "
            "the crew's output is task.output['result'] (or the task's XComArg ['result'])."
        )


@attr.define(slots=False)
class _CrewTaskDecorator(TaskDecoratorBase):  # type: ignore[misc]
    """Airflow's TaskFlow decorator whose XComArgs read a key a wait may leave out
    (:data:`~airflow_provider_crew.waiting.xcom.NONE_WHEN_ABSENT`) as None, as
    ``CrewKickoffOperator.output`` does."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return crew_output(super().__call__(*args, **kwargs).operator)  # type: ignore[attr-defined]

    def _expand(self, expand_input: Any, *, strict: bool) -> Any:
        return crew_output(super()._expand(expand_input, strict=strict).operator)  # type: ignore[attr-defined]


def crew_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """``@task.crew``: the decorated function returns the crew's inputs; the task starts the crew and
    waits for it, as :class:`~airflow_provider_crew.operators.crew.CrewKickoffOperator` does.

    Every other ``CrewKickoffOperator`` parameter is an argument of the decorator
    (docs/howto/kickoff.rst, "TaskFlow: ``@task.crew``").

    :param python_callable: The function; ``@task.crew`` and ``@task.crew(...)`` both work.
    """
    check_decorator_arguments(kwargs)
    kwargs.pop("multiple_outputs", None)

    def decorate(function: Callable[..., Any]) -> Any:
        return _CrewTaskDecorator(
            function=function,
            operator_class=_CrewDecoratedOperator,
            multiple_outputs=False,
            kwargs=kwargs,
            decorator_name="task.crew",
        )

    if python_callable is None:
        return decorate  # type: ignore[return-value]
    if not callable(python_callable):
        raise TypeError(f"{DECORATOR} takes keyword arguments only, got {python_callable!r}.")
    return decorate(python_callable)  # type: ignore[no-any-return]


#: What the reference tables show for the decorator: the parameters of this operator.
crew_task.decorated_operator_class = _CrewDecoratedOperator  # type: ignore[attr-defined]

__all__ = ["crew_task"]
