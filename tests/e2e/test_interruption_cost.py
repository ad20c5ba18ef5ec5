"""What an interruption costs, end to end, as a finance engineer checks it: the
OpenAI SDK through the real proxy to a flaky upstream (the simulator's
``fail_first``) that cuts a stream twice before it answers; the client sends it
again whole each time, as a user's retry does. The audit's interruption cost is
the sum of the two cut rows, to the cent and to the last place; all spend is
the sum of the three; once the recorder chains retries (issue 32 §2: ``retry_of``,
``attempt``), the two retries and the input they sent again are counted too."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import openai
import pytest

from recorder.billing.interruptions import input_cost
from recorder.core.money import ZERO
from recorder.core.price_files import shipped_prices
from recorder.simulate import Simulator
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.ports import free_port
from tests.kit.proxy_thread import running_proxy

pytestmark = pytest.mark.slow

MODEL = "gpt-4o+rst=6+fail_first=2"  # cut after 6 events, twice; then answered
CENT = Decimal("0.01")


def ask(client: openai.OpenAI, question: str) -> int:
    """The request, sent again whole after each cut; how many attempts it took
    (the simulator counts attempts by body: each test asks its own question)."""
    for attempt in range(1, 6):
        try:
            for _ in client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": question}],
                stream=True,
                stream_options={"include_usage": True},
            ):
                pass
            return attempt
        except openai.APIConnectionError:  # the SDK's word for the cut connection
            continue
    raise AssertionError("never answered")


def test_a_cut_attempt_and_two_retries_cost_what_their_rows_say(
    sim: Simulator, confdir: Path, db_url: str, tmp_path: Path, cli: Cli
) -> None:
    sql = SqlSink(db_url, tmp_path / "spool")
    with running_proxy([f"reverse:{sim.url}@{free_port()}"], str(confdir), also=sql) as proxy:
        client = openai.OpenAI(
            base_url=proxy.url() + "/v1", api_key="sk-e2e-finance-0000000001", max_retries=0
        )
        assert ask(client, f"What does an interruption cost? ({tmp_path.name})") == 3
        client.close()
        records = proxy.sink.wait_for(3)
    assert [r.outcome for r in records] == [
        "upstream_disconnect",
        "upstream_disconnect",
        "completed",
    ]
    assert all(r.cost_usd for r in records)

    code, out, err = cli(
        "audit", "--interruptions", "--db", db_url, "--by", "none", "--format", "json"
    )
    assert code == 0, err
    group, total = json.loads(out)
    assert total["group"] == "TOTAL"
    costs = [Decimal(r.cost_usd or 0) for r in records]
    cut = costs[0] + costs[1]
    assert Decimal(group["interruption_cost_usd"]) == cut
    assert Decimal(group["interruption_cost_usd"]).quantize(CENT, ROUND_HALF_EVEN) == cut.quantize(
        CENT, ROUND_HALF_EVEN
    )
    assert Decimal(group["cost_usd"]) == sum(costs, ZERO)
    assert group["interrupted_attempts"] == 2
    # the cut streams never reported their usage: their cost is an estimate, and says so
    assert Decimal(group["estimated_interruption_cost_usd"]) == cut
    if not hasattr(records[2], "retry_of"):
        return  # retry chains are recorded from issue 32 §2 on
    chain: list[Any] = [getattr(r, "retry_of", None) for r in records]
    assert chain == [None, records[0].id, records[1].id]
    assert [getattr(r, "attempt", None) for r in records] == [1, 2, 3]
    assert group["retries"] == 2
    assert group["resent_input_tokens"] == sum(r.input_tokens or 0 for r in records[1:])
    resent = sum((input_cost(r.to_dict(), shipped_prices()) or ZERO for r in records[1:]), ZERO)
    assert Decimal(group["resent_input_cost_usd"]) == resent > 0
