"""The object reads and the operation-result rows of the store, once for both cores: each
core runs the SQL built here in its own driver, and keeps only its dialect (``SQL_DIALECTS``:
placeholder, how a kind is matched, what "true" is spelled)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from wire import EventRecord, EventType

from ._ingest import ObjectKey
from ._labels import Dialect, selector_sql
from ._okey import (
    GROUP_KIND_NAMESPACE,
    OBJECTS_PER_KIND,
    okey_equals,
    okey_of,
    okey_range,
    okey_range_params,
)
from ._paging import check_limit, check_query_coordinates, make_token, read_token
from ._prepared import check_coordinates, upsert_row_and_view
from ._records import KindOverview, ObjectPage, StoredObject, group_of

_DELETED = int(EventType.DELETED)

OBJECT_COLUMNS = (
    "account, api_version, kind, namespace, name, uid, resource_version, body, updated_at_ms"
)


@dataclass(frozen=True)
class SqlDialect:
    """What differs in the shared statements: ``mark`` the placeholder; ``kind_key`` the
    column a kind is keyed by (case-insensitive) and ``kind_match`` the condition matching it
    to a parameter; ``true`` an always-true condition. And how the objects are keyed: by
    their five coordinates on SQLite, by one column of them joined on PostgreSQL (``_okey``);
    the methods below are every condition that differs for it, so no caller asks which."""

    name: Dialect
    mark: str
    kind_key: str
    kind_match: str
    true: str

    @property
    def one_key(self) -> bool:
        """Whether objects are keyed by one column, ``okey`` (PostgreSQL)."""
        return self.name == "postgresql"

    def key_match(self) -> str:
        """The condition "the object row is the one of the next five parameters (account,
        grp, kind, namespace, name)"."""
        m = self.mark
        if self.one_key:
            return okey_equals(m)
        return f"account={m} AND grp={m} AND kind={m} AND namespace={m} AND name={m}"

    def objects_under(
        self, coordinates: Sequence[Any], mark: str | None = None
    ) -> tuple[str, list[Any]]:
        """The condition "the object's leading coordinates (account, then grp, kind,
        namespace: one to four of them) are ``coordinates``" and its parameters (``mark``:
        another placeholder than the dialect's)."""
        m = mark or self.mark
        if self.one_key:
            return okey_range([m] * len(coordinates)), okey_range_params(coordinates)
        columns = ("account", "grp", "kind", "namespace")[: len(coordinates)]
        return " AND ".join(f"{c}={m}" for c in columns), list(coordinates)

    def key_order(self) -> str:
        """The ORDER BY of objects in their key's order."""
        return "okey" if self.one_key else f"account, grp, {self.kind_key}, namespace, name"

    def after_key(self) -> str:
        """The condition "the object comes after the next five parameters' key"."""
        m = self.mark
        if self.one_key:
            return f"okey > {okey_of(m, m, m, m, m)}"
        return f"({self.key_order()}) > ({','.join([m] * 5)})"

    def group_kind_namespace(self) -> str:
        """An object's group, kind key and namespace, as a select list (on PostgreSQL read
        from its key alone: a scan of the key's index needs no row)."""
        return GROUP_KIND_NAMESPACE if self.one_key else f"grp, {self.kind_key}, namespace"

    def object_of_view(self) -> str:
        """The join condition of a view row ``v`` and its object ``o``."""
        if self.one_key:
            return "o.okey=" + okey_of("v.account", "v.grp", "v.kind_key", "v.namespace", "v.name")
        return (
            f"o.account=v.account AND o.grp=v.grp AND o.{self.kind_key}=v.kind_key"
            " AND o.namespace=v.namespace AND o.name=v.name"
        )

    def objects_per_kind(self) -> str:
        """Objects per (account, grp, kind): the kind as stored, and how many."""
        if self.one_key:
            return OBJECTS_PER_KIND
        return "SELECT account, grp, min(kind), count(*) FROM objects GROUP BY account, grp, kind"


SQLITE = SqlDialect("sqlite", "?", "kind", "kind=?", "1")  # kind is COLLATE NOCASE there
POSTGRESQL = SqlDialect("postgresql", "%s", "kind_key", "kind_key=lower(%s)", "TRUE")


def get_object_sql(d: SqlDialect) -> str:
    """One object by (account, grp, kind, namespace, name), ``OBJECT_COLUMNS`` in order."""
    return f"SELECT {OBJECT_COLUMNS} FROM objects WHERE {d.key_match()}"


@dataclass(frozen=True)
class ObjectQuery:
    """What ``Store.query_objects`` was asked for (None: any), as it goes to a core."""

    account: str | None
    group: str | None
    kind: str | None
    namespace: str | None
    label_selector: str | None
    limit: int
    continue_token: str | None


def query_sql(d: SqlDialect, q: ObjectQuery) -> tuple[str, list[Any]]:
    """A page's SELECT (one row more than ``q.limit``, to tell whether another page follows)
    and its parameters; read its rows with ``page_of``. Raises InvalidQuery for a bad
    limit, selector or token.

    Every page is one seek and a walk of the key's index (account, group, kind, namespace,
    name) in order, ended by the LIMIT, whatever the filters and however deep the page
    (``bench_server --objects``: a million objects): the continue token starts the walk
    after the equalities that fix the key's leading columns, and on SQLite an equality
    past an unconstrained column is a filter (see below)."""
    check_limit(q.limit)
    check_query_coordinates(account=q.account, group=q.group, kind=q.kind, namespace=q.namespace)
    if d.one_key:  # another walk of another key
        return _pg_query_sql(d, q)
    m = d.mark
    sqlite = d.name == "sqlite"
    key = ["account", "grp", d.kind_key, "namespace", "name"]
    where: list[str] = []
    params: list[Any] = []
    fixed: list[str] = []  # the values of the key's leading columns the equalities fix
    gap = False
    equalities = (
        (f"account={m}", q.account),
        (f"grp={m}", q.group),
        (d.kind_match, q.kind),
        (f"namespace={m}", q.namespace),
    )
    for index, (clause, value) in enumerate(equalities):
        if value is None:
            if index == 1 and sqlite and q.account and q.kind and not q.continue_token:
                # A kind without its group, first page: the account's groups (a handful,
                # found by a loose index scan, one seek each) make the key's prefix whole,
                # so the kind is sought (0.2 ms for one the account has none of), not
                # looked for among every object of the account (~200 ms at 1M). Its ?1 is
                # the account's parameter, the first. (Later pages start their walk at the
                # token, in the kind's first group.)
                where.append(f"grp IN ({_SQLITE_GROUPS})")
                continue
            gap = True
            continue
        if not gap:
            fixed.append(value)
        elif sqlite:
            # Past an unconstrained key column, SQLite's planner takes an equality for a
            # constant that breaks the index's order and sorts every match (with their
            # bodies) to return one page: 15 s for kind=Pod in an account of 1M objects. A
            # unary + makes it a plain filter (same collation): the index is walked in key
            # order and the LIMIT ends the walk.
            clause = "+" + clause
        where.append(clause)
        params.append(value)
    if q.label_selector:
        clause, values = selector_sql(q.label_selector, d.name)
        where.append(clause)
        params.extend(values)
    if q.continue_token:
        clause, values = _after(d, key, fixed, read_token(q.continue_token))
        where.append(clause)
        params.extend(values)
    sql = (
        f"SELECT {OBJECT_COLUMNS}, grp, {d.kind_key} FROM objects"
        f" WHERE {' AND '.join(where) or d.true} ORDER BY {', '.join(key)} LIMIT {m}"
    )
    return sql, [*params, q.limit + 1]


def _pg_query_sql(d: SqlDialect, q: ObjectQuery) -> tuple[str, list[Any]]:
    """``query_sql`` on PostgreSQL: the equalities that fix the key's leading coordinates
    are one range of its key column (``_okey``), the others filters; the token starts the
    walk after its object's key; the page is that column's order."""
    m = d.mark
    leading: list[str] = []
    where: list[str] = []
    params: list[Any] = []
    equalities = (
        (f"account={m}", q.account),
        (f"grp={m}", q.group),
        (d.kind_match, q.kind),
        (f"namespace={m}", q.namespace),
    )
    gap = False  # past a coordinate the query leaves open, equalities are filters
    for clause, value in equalities:
        if value is None:
            gap = True
        elif not gap:
            leading.append(value)
        else:
            where.append(clause)
            params.append(value)
    if leading:
        clause, values = d.objects_under(leading)
        where.insert(0, clause)
        params[:0] = values
    if q.label_selector:
        clause, values = selector_sql(q.label_selector, d.name)
        where.append(clause)
        params.extend(values)
    if q.continue_token:
        where.append(d.after_key())
        params.extend(read_token(q.continue_token))
    sql = (
        f"SELECT {OBJECT_COLUMNS}, grp, {d.kind_key} FROM objects"
        f" WHERE {' AND '.join(where) or d.true} ORDER BY {d.key_order()} LIMIT {m}"
    )
    return sql, [*params, q.limit + 1]


def _after(
    d: SqlDialect, key: list[str], fixed: list[str], token: list[str]
) -> tuple[str, list[Any]]:
    """The condition "key > token" for rows whose leading key columns equal ``fixed``, in a
    form the index seeks: a comparison of the remaining columns only. (The key over all five
    columns would not be: with equalities on its first ones, neither SQLite nor the index
    can start the walk there, and each page walked from the start of its prefix: 300 ms of
    CPU for a page 900,000 objects deep.) A token from a query with other equalities is
    still exact: compared here on the fixed columns first."""
    for index, value in enumerate(fixed):
        mine, theirs = value, token[index]
        if index == 2:  # the kind: compared case-insensitively on both backends
            mine, theirs = mine.lower(), theirs.lower()
        if mine != theirs:
            return (d.true if mine > theirs else f"NOT {d.true}"), []
    rest = key[len(fixed) :]
    marks = ",".join([d.mark] * len(rest))
    return f"({', '.join(rest)}) > ({marks})", token[len(fixed) :]


# The distinct groups of one account's objects, each found by one index seek past the last
# (the loose index scan); its one parameter is the account.
_SQLITE_GROUPS = (
    "WITH RECURSIVE g(grp) AS ("
    "SELECT (SELECT min(grp) FROM objects WHERE account=?1)"
    " UNION ALL SELECT (SELECT min(grp) FROM objects WHERE account=?1 AND grp > g.grp)"
    " FROM g WHERE g.grp IS NOT NULL)"
    " SELECT grp FROM g WHERE grp IS NOT NULL"
)


def page_of(rows: Sequence[Sequence[Any]], limit: int) -> ObjectPage:
    """The page ``query_sql``'s rows make, with a token after its last object if more follow."""
    objects = [StoredObject(*row[:9]) for row in rows[:limit]]
    if len(rows) <= limit:
        return ObjectPage(objects, None)
    last = rows[limit - 1]
    return ObjectPage(objects, make_token((last[0], last[9], last[10], last[3], last[4])))


def count_sql(d: SqlDialect, account: str | None, kind: str | None) -> tuple[str, list[Any]]:
    """How many objects match, as one ``count(*)`` and its parameters."""
    check_query_coordinates(account=account, kind=kind)
    where: list[str] = []
    params: list[Any] = []
    if account is not None:
        clause, params = d.objects_under([account])
        where.append(clause)
    if kind is not None:
        where.append(d.kind_match)
        params.append(kind)
    return f"SELECT count(*) FROM objects WHERE {' AND '.join(where) or d.true}", params


def kind_overview_sql(d: SqlDialect) -> tuple[str, str]:
    """The two reads of ``Store.kind_overview``: objects per (account, group, kind), counted
    on the coordinates' index (no body is read), and the resume points per (account,
    apiVersion, kind); merge their rows with ``kind_overview``."""
    objects = d.objects_per_kind()
    watches = (
        "SELECT account, api_version, kind, count(*), max(updated_at_ms) FROM resource_versions"
        " GROUP BY account, api_version, kind"
    )
    return objects, watches


def kind_overview(
    object_rows: Sequence[Sequence[Any]], watch_rows: Sequence[Sequence[Any]]
) -> list[KindOverview]:
    """``kind_overview_sql``'s rows as one KindOverview per (account, group, kind), the kind
    compared case-insensitively; ordered by account, group and kind."""
    found: dict[tuple[str, str, str], KindOverview] = {}
    for account, group, kind, count in object_rows:
        found[(account, group, kind.lower())] = KindOverview(account, group, kind, int(count))
    for account, api_version, kind, watches, updated in watch_rows:
        group = group_of(api_version)
        key = (account, group, kind.lower())
        seen = found.get(key) or KindOverview(account, group, kind)
        found[key] = replace(
            seen,
            synced_watches=seen.synced_watches + int(watches),
            watch_updated_ms=max(seen.watch_updated_ms, int(updated or 0)),
        )
    return [found[key] for key in sorted(found)]


def resume_points_sql(d: SqlDialect) -> str:
    return (
        "SELECT api_version, kind, scope, resource_version, updated_at_ms"
        f" FROM resource_versions WHERE account={d.mark} ORDER BY api_version, kind, scope"
    )


def stale_objects_where(
    d: SqlDialect, r: EventRecord, group: str, begin_epoch: int
) -> tuple[str, list[Any]]:
    """The objects a sync bracket's end deletes: those of its kind (and namespace, for a
    namespaced watch) not written since the bracket began."""
    coordinates = [r.account, group, r.kind, r.scope] if r.scope else [r.account, group, r.kind]
    where, params = d.objects_under(coordinates)
    return f"{where} AND epoch<{d.mark}", [*params, begin_epoch]


def operation_rows(
    records: Sequence[EventRecord], epoch: int, now_ms: int
) -> tuple[list[list[Any]], list[ObjectKey], list[list[Any]]]:
    """An operation's returned objects (issue 6) as upsert rows (stamped ``epoch``, ``now_ms``),
    the keys of the DELETED ones, and the parameters of ``_views.upsert_view_if_current_sql``
    for those Deck's views show (their view_index row where the object row holds that
    version)."""
    rows: list[list[Any]] = []
    views: list[list[Any]] = []
    for i, r in enumerate(records):
        if r.type == _DELETED:
            check_coordinates(i, r)
            continue
        group = group_of(r.api_version)
        row, view = upsert_row_and_view(i, r, group, epoch, now_ms)
        rows.append(row)
        if view is not None:
            views.append([*view, r.account, group, r.kind, r.namespace, r.name,
                          r.resource_version])  # fmt: skip
    gone = [
        (r.account, group_of(r.api_version), r.kind, r.namespace, r.name)
        for r in records
        if r.type == _DELETED
    ]
    return rows, gone, views
