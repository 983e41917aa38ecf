"""The side-effect policies a tool declares (`on_duplicate`, `retry`, `breaker`, `resources`,
`needs_approval`): checked when the tool is defined, with a precise error; `RetryPolicy` is one
class for model requests and tool calls."""

from __future__ import annotations

import pytest

import llmrtc
from llmrtc import CircuitBreaker, RetryPolicy, ToolDefinition, define_tool, tool
from llmrtc.llm import OpenAIProvider
from llmrtc.llm.compat import RetryPolicy as CompatRetryPolicy
from llmrtc.tools.retry import RetryPolicy as ToolsRetryPolicy


def test_the_issue_example_defines_and_stores_every_policy() -> None:
    @tool(
        on_duplicate="reuse",
        resources=("payments",),
        retry=RetryPolicy(max_retries=2, base_delay=0.2, max_delay=2.0),
        breaker=CircuitBreaker(failures=5, reset_after=30.0),
        needs_approval=True,
    )
    async def refund(order_id: str, amount: float) -> dict[str, float]:
        """Refund an order."""
        return {"amount": amount}

    definition = refund.definition
    assert definition.on_duplicate == "reuse"
    assert definition.resources == ("payments",)
    assert definition.retry == RetryPolicy(max_retries=2, base_delay=0.2, max_delay=2.0)
    assert definition.breaker == CircuitBreaker(failures=5, reset_after=30.0)
    assert definition.needs_approval is True
    assert definition.has_policies


def test_a_plain_tool_has_no_policies() -> None:
    definition = ToolDefinition(name="lookup")
    assert not definition.has_policies
    assert definition.on_duplicate == "allow" and definition.retry is None
    assert definition.resources == () and definition.needs_approval is False


def test_resources_are_stored_sorted_without_repeats() -> None:
    definition = ToolDefinition(name="sync", resources=["crm", "billing", "crm"])
    assert definition.resources == ("billing", "crm")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_duplicate": "merge"}, "on_duplicate must be 'allow', 'reuse' or 'reject'"),
        ({"retry": 3}, "retry must be a RetryPolicy or None"),
        ({"breaker": 5}, "breaker must be a CircuitBreaker or None"),
        ({"resources": "crm"}, "resources must be a list of names"),
        ({"resources": ["c r m"]}, "resources must be a list of names"),
        ({"needs_approval": "yes"}, "needs_approval must be True, False or a callable"),
        (
            {"retry": RetryPolicy(retry_status_errors=False)},
            "retry_status_errors applies to model requests only",
        ),
    ],
)
def test_bad_policies_are_refused_at_definition(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ToolDefinition(name="book", **kwargs)  # type: ignore[arg-type]


def test_a_tool_with_side_effects_is_retried_only_if_it_opts_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING"):
        charge = ToolDefinition(
            name="charge", side_effects=["charges the card"], retry=RetryPolicy()
        )
    assert not charge.retries
    # The warning offers both ways out.
    assert "could do them twice" in caplog.text
    assert "on_duplicate='reuse'" in caplog.text and "retry_side_effects=True" in caplog.text
    opted = ToolDefinition(
        name="charge", side_effects=["charges"], retry=RetryPolicy(retry_side_effects=True)
    )
    deduplicated = ToolDefinition(
        name="charge", side_effects=["charges"], retry=RetryPolicy(), on_duplicate="reuse"
    )
    assert opted.retries and deduplicated.retries
    assert ToolDefinition(name="read", retry=RetryPolicy()).retries
    assert not ToolDefinition(name="read").retries


def test_a_latent_tool_refuses_retry_and_breaker() -> None:
    for policy in ({"retry": RetryPolicy()}, {"breaker": CircuitBreaker()}):
        definition = ToolDefinition(
            name="sentiment",
            output_schema={"type": "string"},
            **policy,  # type: ignore[arg-type]
        )
        with pytest.raises(ValueError, match="latent"):
            define_tool(definition)


def test_retry_policy_is_one_class_everywhere() -> None:
    assert llmrtc.RetryPolicy is CompatRetryPolicy is ToolsRetryPolicy
    assert llmrtc.llm.RetryPolicy is ToolsRetryPolicy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"max_retries": 1.5}, "max_retries must be an int"),
        ({"base_delay": -1}, "base_delay and max_delay must be >= 0"),
        ({"attempt_timeout": 0}, "attempt_timeout must be seconds > 0"),
        ({"retry_on": "ValueError"}, "retry_on must be exception classes"),
        ({"retry_side_effects": 1}, "retry_side_effects must be True or False"),
    ],
)
def test_bad_retry_policies_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_retry_on_takes_one_class_as_a_tuple() -> None:
    assert RetryPolicy(retry_on=TimeoutError).retry_on == (TimeoutError,)  # type: ignore[arg-type]


def test_delay_doubles_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=3.0)
    for _ in range(50):
        assert 0.8 <= policy.delay(0) <= 1.2
        assert 1.6 <= policy.delay(1) <= 2.4
        assert policy.delay(5) == 3.0


def test_which_failures_a_tool_retry_takes() -> None:
    default = RetryPolicy()
    assert default.retries(ConnectionError()) and default.retries(ValueError())
    assert not default.retries(llmrtc.ToolError("no table at 8"))
    by_class = RetryPolicy(retry_on=(ConnectionError,))
    assert by_class.retries(ConnectionResetError()) and not by_class.retries(ValueError())
    by_predicate = RetryPolicy(retry_on=lambda exc: "again" in str(exc))
    assert by_predicate.retries(RuntimeError("try again")) and not by_predicate.retries(
        RuntimeError("no")
    )

    def broken(exc: BaseException) -> bool:
        raise KeyError("oops")

    assert not RetryPolicy(retry_on=broken).retries(RuntimeError())


def test_a_model_provider_refuses_tool_only_retry_fields() -> None:
    for policy in (
        RetryPolicy(attempt_timeout=2.0),
        RetryPolicy(retry_on=(ValueError,)),
        RetryPolicy(retry_side_effects=True),
    ):
        with pytest.raises(ValueError, match="apply to tool calls only"):
            OpenAIProvider("m", base_url="http://127.0.0.1:9/v1", api_key="x", retry=policy)
