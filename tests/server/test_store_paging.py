"""Object queries page by page under every filter, on both backends, and how SQLite runs them.

The store rewrites a page's keyset condition and, on SQLite, its equalities (``_queries``),
so that a page is one index walk at any depth (issue 17: a million objects). What a page
holds must not change: every combination of filters is paged here with a small limit and
compared with the same selection made in Python; and no SQLite plan may sort.
"""

from __future__ import annotations

import itertools

import apsw
import pytest
import trio

from server.store import StoredObject
from server.store._paging import make_token
from server.store._queries import SQLITE, ObjectQuery, query_sql
from server.store._schema import migrate
from tests.server._stores import StoreBackend
from tests.server.test_store import obj
from wire import EventRecord

# (apiVersion, kind): kinds that share a name across groups (Event), groups of one kind only.
_KINDS = (
    ("v1", "Pod"),
    ("v1", "Event"),
    ("events.k8s.io/v1", "Event"),
    ("apps/v1", "Deployment"),
    ("v1", "Namespace"),
)
_ACCOUNTS = ("prod", "stage")


def _records(account: str) -> list[EventRecord]:
    records = []
    for (api_version, kind), namespace, i in itertools.product(_KINDS, ("a", "b", ""), range(3)):
        if (kind == "Namespace") != (namespace == ""):
            continue  # namespaces are cluster-scoped, the other kinds are not
        if account == "stage" and kind == "Deployment":
            continue  # a kind one account has none of
        name = f"{kind.lower()}-{namespace}-{i}-{api_version.split('/')[0]}"
        records.append(
            obj(name, namespace=namespace, kind=kind, api_version=api_version, account=account)
        )
    return records


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _key(o: StoredObject) -> tuple[str, str, str, str, str]:
    return (o.account, _group(o.api_version), o.kind.lower(), o.namespace, o.name)


_FILTERS = list(
    itertools.product(
        (None, "prod"),  # account
        (None, "", "events.k8s.io"),  # group
        (None, "event", "Deployment", "pod"),  # kind, in any case
        (None, "a", ""),  # namespace ("": cluster-scoped)
    )
)


async def test_every_filter_pages_through_exactly_its_objects(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(60):
        async with store_backend.open() as store:
            for holder in _ACCOUNTS:
                await store.apply_batch(holder, _records(holder))
            everything = (await store.query_objects(limit=1000)).objects
            assert len(everything) == sum(len(_records(a)) for a in _ACCOUNTS)
            assert [_key(o) for o in everything] == sorted(_key(o) for o in everything)
            for account, group, kind, namespace in _FILTERS:
                expected = [
                    _key(o)
                    for o in everything
                    if account in (None, o.account)
                    and group in (None, _group(o.api_version))
                    and (kind is None or kind.lower() == o.kind.lower())
                    and namespace in (None, o.namespace)
                ]
                got: list[tuple[str, str, str, str, str]] = []
                token = None
                while True:
                    page = await store.query_objects(
                        account=account,
                        group=group,
                        kind=kind,
                        namespace=namespace,
                        limit=2,
                        continue_token=token,
                    )
                    got += [_key(o) for o in page.objects]
                    if page.next_token is None:
                        break
                    token = page.next_token
                assert got == expected, (account, group, kind, namespace)


async def test_a_token_from_another_query_still_means_after_its_object(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            for holder in _ACCOUNTS:
                await store.apply_batch(holder, _records(holder))
            everything = [_key(o) for o in (await store.query_objects(limit=1000)).objects]
            # The token of the first page of every Deployment (of "prod", the first account).
            first = await store.query_objects(kind="Deployment", limit=1)
            assert first.next_token is not None
            mark = _key(first.objects[0])
            for account, kind in (
                ("prod", "pod"),
                ("prod", "Event"),
                ("stage", "pod"),
                (None, None),
            ):
                page = await store.query_objects(
                    account=account, kind=kind, limit=1000, continue_token=first.next_token
                )
                expected = [
                    k
                    for k in everything
                    if k > mark
                    and account in (None, k[0])
                    and (kind is None or k[2] == kind.lower())
                ]
                assert [_key(o) for o in page.objects] == expected, (account, kind)


@pytest.mark.parametrize("token", [False, True], ids=["first-page", "later-page"])
def test_no_sqlite_page_is_sorted_outside_the_index(token: bool) -> None:
    conn = apsw.Connection(":memory:")
    migrate(conn, 0)
    continue_token = None
    if token:
        continue_token = make_token(["prod", "", "Pod", "a", "pod-a-1"])
    for account, group, kind, namespace in _FILTERS:
        for selector in (None, "app=web"):
            q = ObjectQuery(account, group, kind, namespace, selector, 10, continue_token)
            sql, params = query_sql(SQLITE, q)
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            assert not [step for step in plan if "TEMP B-TREE" in step], (q, plan)
            assert any("objects_key" in step for step in plan), (q, plan)
