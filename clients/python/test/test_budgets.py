"""Budgets without SQL: a team's monthly budget in EUR with its users'
daily budgets in Berlin, through cost, ensure_quota, set_parent, set_alerts
and quotas, and a refusal's denied_by turned into the user's message."""
from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

import tokenbucket
from conftest import conninfo, make_bucket, stats, url


def prices(admin, model: str) -> None:
    admin.execute("INSERT INTO tb_prices (model, currency, input_per_million, "
                  "output_per_million, cached_input_per_million, valid_from) "
                  "VALUES (%s, 'EUR', 2.5, 10, 1.25, '2020-01-01') ON CONFLICT DO NOTHING",
                  (model,))


def message(refused: tokenbucket.RateLimited, team: str) -> str:
    """README's example: the user's message from the level that refused."""
    level = refused.decision.denied_by if refused.decision is not None else None
    hours = refused.retry_after / 3600
    if level == team:
        return f"Your team's monthly budget is spent; it renews in {hours / 24:.0f} days."
    return f"Your daily budget is spent; it renews in {hours:.0f} hours."


def test_budgets_sync(admin, name):
    model, team, user = name + "chat", name + "team", name + "team:ann"
    prices(admin, model)
    lim = tokenbucket.Limiter(conninfo())
    cost = lim.cost(model, 3000, 1000, cached=2048)
    # (3000 - 2048) x 2.5 + 2048 x 1.25 + 1000 x 10, per million: exact
    assert cost == Decimal("0.01494")
    assert lim.cost(model, 1000) == Decimal("0.0025")
    assert lim.ensure_quota(team, 500, "1 month", time_zone="Europe/Berlin") == "created"
    assert lim.ensure_quota(team, 500, "1 month", time_zone="Europe/Berlin") == "unchanged"
    assert lim.ensure_quota(user, 20, "1 day", time_zone="Europe/Berlin") == "created"
    lim.set_parent(user, team)
    lim.set_alerts(team, [0.5, 0.9])
    assert admin.execute("SELECT array_agg(threshold ORDER BY threshold) FROM tb_alerts "
                         "WHERE bucket = %s", (team,)).fetchone()[0] == [0.5, 0.9]
    assert lim.try_(user, float(cost)).granted
    q = {x.name: x for x in lim.quotas(prefix=name)}
    assert set(q) == {team, user}
    assert q[team].budget == 500 and q[team].period == "1 mon"
    assert q[team].time_zone == "Europe/Berlin"
    assert abs(q[team].spent - float(cost)) < 1e-9 and abs(q[user].remaining - 19.98506) < 1e-6
    assert isinstance(q[user].period_end, datetime) and q[user].period_end > q[user].period_start
    # the user's day refuses first, then the team's month: each says so
    admin.execute("SELECT tb_sync(%s, 1)", (user,))
    with pytest.raises(tokenbucket.RateLimited) as e:
        lim.reserve(user, 5, timeout=0)
    assert e.value.decision.denied_by == user
    assert message(e.value, team).startswith("Your daily budget is spent; it renews in")
    admin.execute("SELECT tb_sync(%s, 100)", (user,))
    admin.execute("SELECT tb_sync(%s, 1)", (team,))
    with pytest.raises(tokenbucket.RateLimited) as e:
        lim.reserve(user, 5, timeout=0)
    assert e.value.decision.denied_by == team and e.value.retry_after > 3600
    assert message(e.value, team).startswith("Your team's monthly budget is spent")
    lim.set_parent(user, None)
    lim.set_alerts(team, [])
    with pytest.raises(tokenbucket.DatabaseError) as e:
        lim.cost(name + "unknown-model", 1)
    assert "no price for model" in str(e.value)
    lim.close()


async def test_budgets_async(admin, name):
    model, team = name + "chat", name + "team"
    prices(admin, model)
    for driver in ("asyncpg", "psycopg"):
        lim = tokenbucket.AsyncLimiter(url() if driver == "asyncpg" else conninfo(),
                                       driver=driver)
        assert await lim.cost(model, 3000, 1000, 2048) == Decimal("0.01494")
        assert await lim.ensure_quota(team, 500, "1 month", time_zone="Europe/Berlin",
                                      starts=datetime(2020, 1, 1)) != "exists"
        await lim.ensure_quota(team + ":bob", 20, "1 day", time_zone="Europe/Berlin")
        await lim.set_parent(team + ":bob", team)
        await lim.set_alerts(team, [0.8])
        q = {x.name: x for x in await lim.quotas(prefix=team)}
        assert q[team].budget == 500 and q[team + ":bob"].period == "1 day"
        await lim.set_parent(team + ":bob", None)
        await lim.close()


# ---- what a settle gives back up a hierarchy -------------------------------------

def hierarchy(admin, name: str) -> tuple[str, str, str]:
    """A user under a team, a second team; no refill to speak of."""
    team, other, user = name + "team", name + "other", name + "team:ann"
    for b in (team, other, user):
        make_bucket(admin, b, 1000, 1, 36000)
    admin.execute("SELECT tb_set_parent(%s, %s)", (user, team))
    return team, other, user


def near(admin, bucket: str, expected: float) -> bool:
    """The bucket's own tokens (tb_peek of a child gives the least up its parents)."""
    return abs(stats(admin, bucket)["tokens"] - expected) < 0.1


def test_settle_gives_back_to_the_parent(admin, name):
    team, other, user = hierarchy(admin, name)
    lim = tokenbucket.Limiter(conninfo())
    with lim.reserve(user, 100) as r:
        r.settle(30)                                   # 70 back, to the user and the team
    assert near(admin, user, 970) and near(admin, team, 970)
    with lim.reserve({user: 100, other: 1}, wait="server") as r:     # tb_acquire_all_wait
        r.refund()
    assert near(admin, user, 970) and near(admin, team, 970) and near(admin, other, 1000)
    admin.execute("SELECT tb_create_limit(%s, 2)", (name + "calls",))
    with lim.reserve(user, 100, lease=name + "calls") as r:        # tb_lease_all
        r.settle(60)
    assert near(admin, user, 910) and near(admin, team, 910)
    # the limiter's own settle and refund, with the moment a reservation keeps
    d = lim.reserve(user, 100, reserve=0.01, timeout=0).decision
    assert d.granted and d.reserved_at is not None
    lim.settle(user, 100, 40, reserved_at=d.reserved_at)
    assert near(admin, user, 870) and near(admin, team, 870)
    d = lim.reserve({user: 50, other: 1}, timeout=0).decision
    lim.refund({user: 50, other: 1}, reserved_at=d.reserved_at)
    assert near(admin, user, 870) and near(admin, team, 870) and near(admin, other, 1000)
    # without the moment: to the bucket alone, as tb_settle without reserved_at
    lim.try_(user, 10)
    lim.settle(user, 10, 0)
    assert near(admin, user, 870) and near(admin, team, 860)
    lim.close()


def test_moved_user_gives_nothing_to_the_new_team(admin, name):
    team, other, user = hierarchy(admin, name)
    lim = tokenbucket.Limiter(conninfo())
    with lim.reserve(user, 100) as r:
        lim.set_parent(user, other)                   # moved between reserve and settle
        r.settle(30)
    # the user gets its 70 back; the old team is no longer above it, the new
    # one never lent them
    assert near(admin, user, 970) and near(admin, team, 900) and near(admin, other, 1000)
    lim.close()


async def test_settle_gives_back_to_the_parent_async(admin, name):
    for driver in ("asyncpg", "psycopg"):
        team, other, user = hierarchy(admin, name + driver)
        lim = tokenbucket.AsyncLimiter(url() if driver == "asyncpg" else conninfo(),
                                       driver=driver)
        async with lim.reserve(user, 100) as r:
            await r.settle(30)
        assert near(admin, user, 970) and near(admin, team, 970)
        async with lim.reserve({user: 100, other: 1}) as r:
            await r.refund()
        assert near(admin, user, 970) and near(admin, team, 970)
        d = (await lim.reserve(user, 100)).decision
        await lim.settle(user, 100, 40, reserved_at=d.reserved_at)
        await lim.refund(user, 0, reserved_at=d.reserved_at)
        assert near(admin, user, 930) and near(admin, team, 930)
        async with lim.reserve(user, 100) as r:
            await lim.set_parent(user, other)
            await r.settle(30)
        assert near(admin, user, 900) and near(admin, team, 830) and near(admin, other, 1000)
        await lim.close()


def test_celery_settle_gives_back_to_the_parent(admin, name):
    from celery import Celery
    import tokenbucket.celery as tbc

    team, other, user = hierarchy(admin, name)
    lim = tokenbucket.Limiter(conninfo())
    app = Celery("tb_test", broker="memory://", backend="cache+memory://")

    @app.task(bind=True, max_retries=None)
    @tbc.limited(lim, {user: 100})
    def work(self, reservation=None):
        reservation.settle(30)

    work.apply().get()
    assert near(admin, user, 970) and near(admin, team, 970)
    lim.close()
