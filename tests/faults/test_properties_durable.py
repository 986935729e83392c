"""Property-based: the queue model of tests/test_properties.py on a primary with a replica,
with durable enqueues, the replica cut off and healed, and failovers that lose what it lacked
(tests/support/queue_model_replicated.py).

After every step Redis holds exactly what the model holds; after a failover, that is the state
of the cut: an enqueue that raised DurabilityError may exist (it does while the primary
lives, and is gone after a failover), one that returned exists on the promoted replica.

Each cut ends in a reconnection or a resynchronisation, which waits up to a second for the
server's replication timer, so this runs fewer sequences than the plain model test; with
`--servers all` it runs more.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from tests.support.properties import property_settings, property_timeout
from tests.support.queue_model_check import check_redis_holds_exactly_the_model
from tests.support.queue_model_replicated import Servers, replicated_queue_model, replicated_servers
from tests.support.queue_model_state import Step
from tests.test_properties import PAYLOADS, step_lists

# The plain model's operations, the durable ones most often, and the replication events.
STEPS = step_lists(
    st.sampled_from(
        ["dispatch"] * 3
        + ["durable"] * 4
        + ["enqueue", "replace", "cancel", "requeue", "reschedule", "debounce"]
        + ["claim"] * 3
        + ["success"] * 2
        + ["failure", "crash", "undecodable", "replace-held", "extend-held"]
        + ["cut"] * 2
        + ["failover"] * 2
        + ["heal"]
    ),
    st.sampled_from(["a", "{Prop}", "x:y"]),
    PAYLOADS,
)

pytestmark = [
    pytest.mark.timeout(property_timeout(600)),
    pytest.mark.filterwarnings("ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    """A primary and a replica for every sequence (each starts from a flushed, linked pair)."""
    with replicated_servers() as pair:
        yield pair


def examples(config: pytest.Config) -> int:
    return 200 if config.getoption("servers") == "all" else 25


def test_durable_enqueues_that_returned_survive_every_failover(
    servers: Servers, pytestconfig: pytest.Config
) -> None:
    @property_settings(
        examples(pytestconfig),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(steps=STEPS)
    def run(steps: list[Step]) -> None:
        with replicated_queue_model(servers) as model:
            assert model.run(model.client.dbsize()) == 0
            for step in steps:
                model.apply(step)
                check_redis_holds_exactly_the_model(model)
            seen.update(
                failovers=seen["failovers"] + model.failovers,
                survived=seen["survived"] + model.survived,
                refused=seen["refused"] + model.refused,
            )

    seen = {"failovers": 0, "survived": 0, "refused": 0}
    run()
    print(f"\n{seen}")
    # The sequences reached what this test is about.
    assert seen["failovers"] >= 3
    assert seen["survived"] >= 3
    assert seen["refused"] >= 3
