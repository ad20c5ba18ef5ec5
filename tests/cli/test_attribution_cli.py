"""Who spent it and what the retries were, from the command line, on SQLite and
PostgreSQL: `recorder sessions --tag/--retries`, `recorder audit --by
tag:team,user,session` (groups that add up to the streams), `recorder show ID`
with the retry chain (each attempt, how it ended, what it cost)."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from recorder.core.money import ZERO
from recorder.core.record import StreamRecord
from recorder.core.short_id import short_id
from tests.kit.billing import store
from tests.kit.cli import Cli
from tests.kit.records import rec, retry_chain_records


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    chain = retry_chain_records(tags={"team": "search", "feature": "summarise"})
    others = [
        rec(tags={"team": "ads"}, user_id="u:aaaa", session_id="s-1"),
        rec(tags={"team": "search"}, user_id="u:aaaa", session_id="s-1"),
        rec(user_id="u:bbbb", session_id="s-2"),
        rec(),  # no attribution: recorded before, or a client that says nothing
    ]
    records = [*chain, *others]
    store(db_url, tmp_path / "spool", records)
    return records


def ids(out: str) -> set[str]:
    return {r["id"] for r in json.loads(out)}


def test_sessions_by_tag_and_retries(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, err = cli("sessions", "--db", db_url, "--tag", "team=search", "--format", "json")
    assert code == 0, err
    assert ids(out) == {r.id for r in stored if (r.tags or {}).get("team") == "search"}
    both = ("--tag", "team=search", "--tag", "feature=summarise")
    _, out, _ = cli("sessions", "--db", db_url, *both, "--format", "json")
    assert ids(out) == {r.id for r in stored[:3]}
    _, out, _ = cli("sessions", "--db", db_url, "--retries", "--format", "json")
    assert ids(out) == {r.id for r in stored if r.retry_of}
    assert len(ids(out)) == 2
    code, _, err = cli("sessions", "--db", db_url, "--tag", "team")
    assert code == 2 and "NAME=VALUE" in err


def test_audit_by_tag_user_and_session_adds_up(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    by = "tag:team,user,session"
    code, out, err = cli("audit", "--db", db_url, "--by", by, "--format", "json")
    assert code == 0, err
    *groups, total = json.loads(out)
    assert list(total)[:3] == ["tag:team", "user", "session"]
    assert sum(g["requests"] for g in groups) == len(stored) == total["requests"]
    expected: dict[tuple[object, ...], Decimal] = {}
    for r in stored:
        key = ((r.tags or {}).get("team"), r.user_id, r.session_id)
        expected[key] = expected.get(key, ZERO) + Decimal(r.cost_usd or 0)
    got = {(g["tag:team"], g["user"], g["session"]): Decimal(g["cost_usd"]) for g in groups}
    assert got == expected
    # and the interruptions by the same keys: the chain's cut attempts are search's
    code, out, _ = cli(
        "audit", "--interruptions", "--db", db_url, "--by", "tag:team", "--format", "json"
    )
    *groups, total = json.loads(out)
    search = next(g for g in groups if g["tag:team"] == "search")
    chain = stored[:3]
    assert Decimal(search["interruption_cost_usd"]) == sum(
        (Decimal(r.cost_usd or 0) for r in chain[:2]), ZERO
    )
    assert search["retries"] == 2 == total["retries"]


def test_show_prints_the_retry_chain(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    first, second, third = stored[:3]
    for shown in (first, second, third):
        code, out, err = cli("show", shown.id or "", "--db", db_url, "--format", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["id"] == shown.id
        chain = doc["retry_chain"]
        assert [a["id"] for a in chain] == [first.id, second.id, third.id]
        assert [a["attempt"] for a in chain] == [1, 2, 3]
        assert [a["outcome"] for a in chain] == [r.outcome for r in (first, second, third)]
        assert [Decimal(a["cost_usd"]) for a in chain] == [
            Decimal(r.cost_usd or 0) for r in (first, second, third)
        ]
    code, out, _ = cli("show", second.id or "", "--db", db_url, "--format", "table")
    assert code == 0
    text = out[out.index("retry chain") :]
    assert "retry chain: 3 attempts" in text
    for r in (first, second, third):
        assert short_id(r.id or "") in text
    marked = [line for line in text.splitlines() if line.startswith(">")]
    assert len(marked) == 1 and short_id(second.id or "") in marked[0]
    cut = sum((Decimal(r.cost_usd or 0) for r in (first, second)), ZERO)
    said = re.search(r"the (\d+) that did not complete cost \$([0-9.]+)", text)
    assert said is not None and said.group(1) == "2"
    assert Decimal(said.group(2)) == cut
    # a stream in no chain shows none
    _, out, _ = cli("show", stored[-1].id or "", "--db", db_url, "--format", "json")
    assert "retry_chain" not in json.loads(out)
