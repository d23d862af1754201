"""The index behind Deck's views: one row per object of a UI kind, kept in the objects'
own transactions, and the reads over it (clouddriver-views.md; the model is ``server.views``).

Theory of operation. Every object write that the views show (``server.views.role_of``) also
upserts a ``view_index`` row: its Spinnaker kind (role), moniker application and cluster,
the controller it belongs to, and its lower-cased cache key for ``/search``. It is computed
from the object's metadata while the batch is prepared (``_prepared``), written right after
its run of object writes, and skipped when nothing it holds changed (a pod's status update
rewrites nothing here). A trigger on ``objects`` deletes the row with its object, so every
deletion (a watch's DELETED, a sync bracket's sweep, an operation's delete, an account's
removal) keeps the index exact without code of its own. An operation's returned objects
update the index only where the object row now holds that version (``_UPSERT_NEWER`` may
have kept a newer one).

Reads are ``ViewQuery``s, each one SQL statement: the rows of a role and application (an
app's server groups), the rows whose controller is a row of another query (their pods), the
rows in the namespaces of another query's rows (the Services near them), with or without the
object bodies (a join on the objects' key). An application's clusters are a DISTINCT over
the (role, app, account, cluster) index; nothing scans every object per request.

A database from before this index (schema 4) gets it built once at open (``view_state``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..views import (
    APP_ROLES,
    CLUSTER_ROLES,
    INSTANCES,
    VIEW_KINDS,
    SearchHits,
    app_key,
    cluster_key,
    index_entry_of,
)

if TYPE_CHECKING:
    from ._queries import SqlDialect

__all__ = [
    "VIEW_COLUMNS",
    "ClusterKeys",
    "IndexedRows",
    "SearchRequest",
    "ViewQuery",
    "ViewRow",
    "object_key_sql",
    "search_hits",
    "view_key",
    "view_row",
    "view_sql",
]

VIEW_COLUMNS = (
    "account",
    "grp",
    "kind_key",
    "namespace",
    "name",
    "kind",
    "role",
    "app",
    "cluster",
    "owner_kind",
    "owner_name",
    "search_key",
)
# The index's key: the kind, then the cache key (which holds the account, namespace and name),
# then the group. So that /search scans, per kind, only the keys, in one index's order; the
# trigger that deletes a row with its object computes the key the way ``cache_key`` does
# (the views' kinds are single words: their lowerCamel is their first letter lowered).
_KEY = "kind_key, search_key, grp"


def object_key_sql(row: str) -> str:
    """SQL for the cache key (``search_key``) of the objects row named ``row``."""
    return (
        f"'kubernetes.v2:infrastructure:' || lower(substr({row}.kind, 1, 1))"
        f" || substr({row}.kind, 2) || ':' || replace({row}.account, ':', ';')"
        f" || ':' || replace({row}.namespace, ':', ';') || ':' || replace({row}.name, ':', ';')"
    )


_OBJECT_KEY_SQL = object_key_sql("old")
_VIEW_KINDS_SQL = ", ".join(f"'{kind}'" for kind in sorted(VIEW_KINDS))

Execute = Callable[[str, Sequence[Any]], list[Any]]


def view_row(
    account: str,
    group: str,
    kind: str,
    namespace: str,
    name: str,
    annotations: object,
    owner_kind: str,
    owner_name: str,
) -> tuple[str, ...] | None:
    """The ``view_index`` row of an object (``VIEW_COLUMNS`` in order) whose controller is
    (``owner_kind``, ``owner_name``); None for a kind the views do not show."""
    entry = index_entry_of(
        account,
        group,
        kind,
        namespace,
        name,
        annotations if isinstance(annotations, dict) else None,
        owner_kind,
        owner_name,
    )
    if entry is None:
        return None
    return (
        account,
        group,
        kind.lower(),
        namespace,
        name,
        kind,
        entry.role,
        entry.app,
        entry.cluster,
        entry.owner_kind,
        entry.owner_name,
        entry.search_key,
    )


def pod_view_row(
    account: str, namespace: str, name: str, owner_kind: str, owner_name: str
) -> tuple[str, ...]:
    """``view_row`` of a Pod, written out: the kind with most of the events (its every status
    change) is worth the ~3 us it saves an event."""
    parts = (account, namespace, name)
    key = f"{account}:{namespace}:{name}" if not any(":" in p for p in parts) else None
    if key is None:
        key = ":".join(p.replace(":", ";") for p in parts)
    return (
        account,
        "",
        "pod",
        namespace,
        name,
        "Pod",
        INSTANCES,
        "",
        "",
        owner_kind.lower(),
        owner_name,
        f"kubernetes.v2:infrastructure:pod:{key}",
    )


# -- schema (the migration step of each backend) ----------------------------------------------

_TABLE_COLUMNS = (
    "account TEXT{c} NOT NULL, grp TEXT{c} NOT NULL, kind_key TEXT{c} NOT NULL,"
    " namespace TEXT{c} NOT NULL, name TEXT{c} NOT NULL, kind TEXT NOT NULL,"
    " role TEXT{c} NOT NULL, app TEXT{c} NOT NULL, cluster TEXT{c} NOT NULL,"
    " owner_kind TEXT{c} NOT NULL, owner_name TEXT{c} NOT NULL, search_key TEXT{c} NOT NULL"
)
# Pods are most of the rows and most of the writes: they are in the indexes they are read by
# only (their key, their owner), the partial indexes leave them out (a query names the same
# condition, ``_NOT_PODS``, for the planner to use them).
_NOT_PODS = "role <> 'instances'"
_OWNED = "owner_name <> ''"
_INDEXES = (
    # an application's clusters and linked objects; every application's clusters
    f"CREATE INDEX view_index_app ON view_index(role, app, account, cluster) WHERE {_NOT_PODS}",
    # the objects a controller owns (a server group's pods, a Deployment's ReplicaSets)
    "CREATE INDEX view_index_owner ON view_index(account, namespace, owner_kind, owner_name)"
    f" WHERE {_OWNED}",
    # the objects of a role in a namespace (the Services near a server group)
    f"CREATE INDEX view_index_ns ON view_index(role, account, namespace) WHERE {_NOT_PODS}",
    # the state of the index: 0 until built from the objects present at the migration
    # and ``clusters``, the version of the set of clusters (``view_clusters``' triggers)
    "CREATE TABLE view_state(id INTEGER PRIMARY KEY CHECK (id = 1), built INTEGER NOT NULL,"
    " clusters BIGINT NOT NULL)",
    "INSERT INTO view_state VALUES (1, 0, 0)",
)
# Every cluster (app, account, cluster) with how many rows of server groups and their
# managers are in it, counted by triggers on view_index (pods never fire them): Gate's
# /applications every 5 s, and /search's cluster keys, read ~1,000 rows here instead of
# walking 10,000 server groups.
_CLUSTER_ROLES_SQL = ", ".join(f"'{r}'" for r in CLUSTER_ROLES)
_COUNTED = "{t}.role IN (" + _CLUSTER_ROLES_SQL + ") AND {t}.app <> '' AND {t}.cluster <> ''"
_CLUSTERS_TABLE = (
    "CREATE TABLE view_clusters(app TEXT{c} NOT NULL, account TEXT{c} NOT NULL,"
    " cluster TEXT{c} NOT NULL, refs INTEGER NOT NULL, PRIMARY KEY (app, account, cluster))"
)
_ADD = (
    "INSERT INTO view_clusters SELECT NEW.app, NEW.account, NEW.cluster, 1 WHERE {when}"
    " ON CONFLICT (app, account, cluster) DO UPDATE SET refs = view_clusters.refs + 1"
)
# A cluster that appears or goes (not a count that moves) changes what /applications answers.
_BUMP = "UPDATE view_state SET clusters = clusters + 1"
_DROP = (
    "UPDATE view_clusters SET refs = refs - 1 WHERE {when} AND app = OLD.app"
    " AND account = OLD.account AND cluster = OLD.cluster;"
    " DELETE FROM view_clusters WHERE app = OLD.app AND account = OLD.account"
    " AND cluster = OLD.cluster AND refs <= 0"
)
# The shape of the data, for SQLite's planner (which has no statistics until an ANALYZE,
# and without them took a scan of the account's rows over the owner index for an app's
# pods: 160 ms instead of 7 at 60,000 rows). Rows, then rows per distinct prefix of each
# index's columns; fixed, so plans do not depend on when an ANALYZE last ran.
_STATS = (
    ("view_index", None, "100000"),
    ("view_index", "view_index_key", "100000 20000 1 1"),
    ("view_index", "view_index_app", "20000 5000 20 20 5"),
    ("view_index", "view_index_owner", "80000 20000 1000 500 5"),
    ("view_index", "view_index_ns", "20000 5000 2500 50"),
)
SQLITE_STEP: tuple[str, ...] = (
    f"CREATE TABLE view_index(id INTEGER PRIMARY KEY, {_TABLE_COLUMNS.format(c='')})",
    f"CREATE UNIQUE INDEX view_index_key ON view_index({_KEY})",
    *_INDEXES,
    "ANALYZE view_index",  # creates sqlite_stat1 when there is none yet
    "DELETE FROM sqlite_stat1 WHERE tbl = 'view_index'",
    *(
        f"INSERT INTO sqlite_stat1 VALUES ('{t}', {'NULL' if i is None else repr(i)}, '{st}')"
        for t, i, st in _STATS
    ),
    "ANALYZE sqlite_schema",  # the planner reads them again
    _CLUSTERS_TABLE.format(c="") + " WITHOUT ROWID",
    f"""CREATE TRIGGER view_clusters_add AFTER INSERT ON view_index
        WHEN {_COUNTED.format(t="NEW")}
        BEGIN {_ADD.format(when="1")}; END""",
    f"""CREATE TRIGGER view_clusters_drop AFTER DELETE ON view_index
        WHEN {_COUNTED.format(t="OLD")}
        BEGIN {_DROP.format(when="1")}; END""",
    f"""CREATE TRIGGER view_clusters_move AFTER UPDATE OF role, app, cluster ON view_index
        BEGIN {_DROP.format(when=_COUNTED.format(t="OLD"))};
        {_ADD.format(when=_COUNTED.format(t="NEW"))}; END""",
    f"CREATE TRIGGER view_clusters_new AFTER INSERT ON view_clusters BEGIN {_BUMP}; END",
    f"CREATE TRIGGER view_clusters_gone AFTER DELETE ON view_clusters BEGIN {_BUMP}; END",
    # A deleted object takes its row along, however it was deleted.
    f"""CREATE TRIGGER objects_view_gone AFTER DELETE ON objects
        WHEN lower(old.kind) IN ({_VIEW_KINDS_SQL})
        BEGIN DELETE FROM view_index WHERE kind_key=lower(old.kind)
            AND search_key={_OBJECT_KEY_SQL} AND grp=old.grp; END""",
)
_C = ' COLLATE "C"'  # byte order, as the objects' keys (``_pg_schema``)
PG_STEP: tuple[str, ...] = (
    f"CREATE TABLE view_index({_TABLE_COLUMNS.format(c=_C)}, PRIMARY KEY ({_KEY}))",
    *_INDEXES,
    f"""CREATE FUNCTION view_index_gone() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM view_index WHERE kind_key=OLD.kind_key
                AND search_key={_OBJECT_KEY_SQL.replace("old.", "OLD.")} AND grp=OLD.grp;
            RETURN NULL;
        END $$""",
    f"""CREATE TRIGGER objects_view_gone AFTER DELETE ON objects FOR EACH ROW
        WHEN (OLD.kind_key IN ({_VIEW_KINDS_SQL})) EXECUTE FUNCTION view_index_gone()""",
    _CLUSTERS_TABLE.format(c=_C),
    f"""CREATE FUNCTION view_clusters_count() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'INSERT' THEN {_DROP.format(when=_COUNTED.format(t="OLD"))}; END IF;
            IF TG_OP <> 'DELETE' THEN {_ADD.format(when=_COUNTED.format(t="NEW"))}; END IF;
            RETURN NULL;
        END $$""",
    f"""CREATE TRIGGER view_clusters_add AFTER INSERT ON view_index FOR EACH ROW
        WHEN ({_COUNTED.format(t="NEW")}) EXECUTE FUNCTION view_clusters_count()""",
    f"""CREATE TRIGGER view_clusters_drop AFTER DELETE ON view_index FOR EACH ROW
        WHEN ({_COUNTED.format(t="OLD")}) EXECUTE FUNCTION view_clusters_count()""",
    f"""CREATE TRIGGER view_clusters_move AFTER UPDATE OF role, app, cluster ON view_index
        FOR EACH ROW WHEN ({_COUNTED.format(t="OLD")} OR {_COUNTED.format(t="NEW")})
        EXECUTE FUNCTION view_clusters_count()""",
    f"""CREATE FUNCTION view_clusters_bump() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN {_BUMP}; RETURN NULL; END $$""",
    """CREATE TRIGGER view_clusters_changed AFTER INSERT OR DELETE ON view_clusters
        FOR EACH ROW EXECUTE FUNCTION view_clusters_bump()""",
)
STEP_DESCRIPTION = "the index of Deck's views: role, application, cluster, owner per object"


def upsert_view_sql(mark: str) -> str:
    """The upsert of one ``view_index`` row that writes nothing when nothing changed."""
    marks = ",".join([mark] * len(VIEW_COLUMNS))
    updated = VIEW_COLUMNS[5:]
    return (
        f"INSERT INTO view_index({', '.join(VIEW_COLUMNS)}) VALUES ({marks})"
        f" ON CONFLICT ({_KEY}) DO UPDATE SET "
        + ", ".join(f"{c}=excluded.{c}" for c in updated)
        + " WHERE "
        + " OR ".join(f"view_index.{c} <> excluded.{c}" for c in updated)
    )


def upsert_view_if_current_sql(mark: str, key_match: str) -> str:
    """Like ``upsert_view_sql``, only where the object row holds the given resourceVersion
    (parameters: the view row, then account, grp, kind, namespace, name, resourceVersion;
    ``key_match`` the condition on the five, ``SqlDialect.key_match``)."""
    marks = ",".join([mark] * len(VIEW_COLUMNS))
    updated = VIEW_COLUMNS[5:]
    m = mark
    return (
        f"INSERT INTO view_index({', '.join(VIEW_COLUMNS)}) SELECT {marks}"
        f" WHERE EXISTS (SELECT 1 FROM objects WHERE {key_match} AND resource_version={m})"
        f" ON CONFLICT ({_KEY}) DO UPDATE SET " + ", ".join(f"{c}=excluded.{c}" for c in updated)
    )


class IndexedRows:
    """The view_index rows this process wrote and knows are still there, so that an object
    update that changes none of them (a pod's status, nearly every event once a cluster is
    listed) costs no statement at all. SQLite only, where one process owns the file: the
    core forgets what its deletions remove (``forget``) and everything when a transaction
    rolls back (``clear``). Hashes only (~100 bytes an entry); at ``max_entries`` it starts
    over (a miss only costs the upsert it saves)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._written: dict[int, int] = {}
        self._max = max_entries

    def changed(self, rows: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
        """The rows to write (new or changed ones), remembered as written."""
        written = self._written
        if len(written) + len(rows) > self._max:
            written.clear()
        fresh: list[tuple[str, ...]] = []
        for row in rows:
            key, value = hash(row[:5]), hash(row)
            if written.get(key) != value:
                written[key] = value
                fresh.append(row)
        return fresh

    def forget(self, keys: Iterable[tuple[str, str, str, str, str]]) -> None:
        """Objects deleted (account, group, kind (any case), namespace, name)."""
        written = self._written
        for account, group, kind, namespace, name in keys:
            written.pop(hash((account, group, kind.lower(), namespace, name)), None)

    def clear(self) -> None:
        self._written.clear()


_KEY_SLOTS = tuple(VIEW_COLUMNS.index(c) for c in _KEY.split(", "))


def view_key(row: Sequence[str]) -> tuple[str, ...]:
    """The view index's key of a ``VIEW_COLUMNS`` row."""
    return tuple(row[i] for i in _KEY_SLOTS)


def pg_views_in() -> tuple[str, str, str]:
    """PostgreSQL's batch write of view rows, as its objects' (``_pg_core``): the temporary
    table of a connection (emptied by the writer, as objects_in), the COPY into it (one row
    per key, each with its place in the COPY, ``ord``: ``view_key``), and the upsert from it
    in that order (a row that changed nothing is not written)."""
    create = (
        "CREATE TEMPORARY TABLE views_in("
        + ", ".join(f"{c} text" for c in VIEW_COLUMNS)
        + ", ord integer)"
    )
    copy = f"COPY views_in ({', '.join(VIEW_COLUMNS)}, ord) FROM STDIN (FORMAT BINARY)"
    updated = VIEW_COLUMNS[5:]
    upsert = (
        f"INSERT INTO view_index({', '.join(VIEW_COLUMNS)})"
        f" SELECT {', '.join(VIEW_COLUMNS)} FROM views_in ORDER BY ord"
        f" ON CONFLICT ({_KEY}) DO UPDATE SET "
        + ", ".join(f"{c}=excluded.{c}" for c in updated)
        + " WHERE "
        + " OR ".join(f"view_index.{c} <> excluded.{c}" for c in updated)
    )
    return create, copy, upsert


# -- reads ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewQuery:
    """Rows of ``view_index`` (None / empty: any). ``owned_by``: only rows whose controller is
    a row of that query; ``near``: only rows in an (account, namespace) of that query's rows.
    ``bodies`` joins the objects (their JSON); ``clusters`` answers the distinct (app,
    account, cluster) triples instead of rows. ``limit`` bounds the answer."""

    roles: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()  # Kubernetes kinds, any case
    app: str | None = None
    account: str | None = None
    namespace: str | None = None
    cluster: str | None = None
    name: str | None = None
    owned_by: ViewQuery | None = None
    near: ViewQuery | None = None
    # only rows whose controller is one of these (account, namespace, Kubernetes kind, name)
    owners: tuple[tuple[str, str, str, str], ...] = ()
    bodies: bool = True
    clusters: bool = False
    # only the version of the set of clusters, as one row's ``resource_version`` (it changes
    # when a cluster appears or goes: an answer built from the clusters can be kept till then)
    version: bool = False
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ViewRow:
    """One answer of a ViewQuery (for ``clusters``: only app, account and cluster are set)."""

    account: str
    group: str
    kind: str
    namespace: str
    name: str
    role: str = ""
    app: str = ""
    cluster: str = ""
    owner_kind: str = ""
    owner_name: str = ""
    api_version: str = ""
    uid: str = ""
    resource_version: str = ""
    body: bytes = field(default=b"", repr=False)


def _marks(mark: str, n: int) -> str:
    return ",".join([mark] * n)


def _where(d: SqlDialect, q: ViewQuery, alias: str, depth: int) -> tuple[list[str], list[Any]]:
    m = d.mark
    clauses: list[str] = []
    params: list[Any] = []
    if q.roles:
        clauses.append(f"{alias}.role IN ({_marks(m, len(q.roles))})")
        params.extend(q.roles)
        if "instances" not in q.roles:
            clauses.append(f"{alias}.{_NOT_PODS}")
    if q.kinds:
        clauses.append(f"{alias}.kind_key IN ({_marks(m, len(q.kinds))})")
        params.extend(k.lower() for k in q.kinds)
    for column, value in (
        ("app", q.app),
        ("account", q.account),
        ("namespace", q.namespace),
        ("cluster", q.cluster),
        ("name", q.name),
    ):
        if value is not None:
            clauses.append(f"{alias}.{column}={m}")
            params.append(value)
    if q.owned_by is not None:
        s = f"s{depth}"
        sub_clauses, sub_params = _where(d, q.owned_by, s, depth + 1)
        clauses.append(f"{alias}.{_OWNED}")
        clauses.append(
            f"({alias}.account, {alias}.namespace, {alias}.owner_kind, {alias}.owner_name)"
            f" IN (SELECT {s}.account, {s}.namespace, {s}.kind_key, {s}.name"
            f" FROM view_index {s} WHERE {' AND '.join(sub_clauses) or d.true})"
        )
        params.extend(sub_params)
    if q.owners:
        clauses.append(f"{alias}.{_OWNED}")
        clauses.append(
            f"({alias}.account, {alias}.namespace, {alias}.owner_kind, {alias}.owner_name)"
            f" IN (VALUES {','.join([f'({_marks(m, 4)})'] * len(q.owners))})"
        )
        for account, namespace, kind, name in q.owners:
            params.extend((account, namespace, kind.lower(), name))
    if q.near is not None:
        s = f"n{depth}"
        sub_clauses, sub_params = _where(d, q.near, s, depth + 1)
        clauses.append(
            f"({alias}.account, {alias}.namespace) IN (SELECT {s}.account, {s}.namespace"
            f" FROM view_index {s} WHERE {' AND '.join(sub_clauses) or d.true})"
        )
        params.extend(sub_params)
    return clauses, params


_ROW_COLUMNS = (
    "v.account, v.grp, v.kind, v.namespace, v.name, v.role, v.app, v.cluster, v.owner_kind,"
    " v.owner_name"
)


def view_sql(d: SqlDialect, q: ViewQuery) -> tuple[str, list[Any]]:
    """One statement answering ``q``; read its rows with ``view_rows``."""
    clauses, params = _where(d, q, "v", 0)
    where = " AND ".join(clauses) or d.true
    if q.clusters:
        sql = (
            f"SELECT DISTINCT v.app, v.account, v.cluster FROM view_index v WHERE {where}"
            " ORDER BY v.app, v.account, v.cluster"
        )
    elif q.bodies:
        sql = (
            f"SELECT {_ROW_COLUMNS}, o.api_version, o.uid, o.resource_version, o.body"
            f" FROM view_index v JOIN objects o ON {d.object_of_view()}"
            f" WHERE {where} ORDER BY v.account, v.namespace, v.kind_key, v.name"
        )
    else:
        sql = (
            f"SELECT {_ROW_COLUMNS} FROM view_index v WHERE {where}"
            " ORDER BY v.account, v.namespace, v.kind_key, v.name"
        )
    if q.limit is not None:
        sql += f" LIMIT {d.mark}"
        params.append(q.limit)
    return sql, params


def _with_body(r: Sequence[Any]) -> ViewRow:
    a, g, k, ns, n, role, app, cluster, owner_kind, owner_name, api, uid, rv, body = r
    return ViewRow(a, g, k, ns, n, role, app, cluster, owner_kind, owner_name, api, uid, rv,
                   bytes(body))  # fmt: skip


def view_rows(q: ViewQuery, rows: Iterable[Sequence[Any]]) -> list[ViewRow]:
    if q.clusters:
        return [ViewRow(r[1], "", "", "", "", app=r[0], cluster=r[2]) for r in rows]
    if q.bodies:
        return [_with_body(r) for r in rows]
    return [ViewRow(*r[:10]) for r in rows]


def read_views(
    d: SqlDialect, execute: Execute, queries: Sequence[ViewQuery]
) -> list[list[ViewRow]]:
    """Every query's rows, in order, through ``execute`` (one read of the caller's)."""
    return [_read(d, execute, q) for q in queries]


def _read(d: SqlDialect, execute: Execute, q: ViewQuery) -> list[ViewRow]:
    if q.version:
        ((version,),) = execute("SELECT clusters FROM view_state", [])
        return [ViewRow("", "", "", "", "", resource_version=str(version))]
    if q.clusters:
        return _clusters(d, execute, q)
    return view_rows(q, execute(*view_sql(d, q)))


def _clusters(d: SqlDialect, execute: Execute, q: ViewQuery) -> list[ViewRow]:
    """The distinct (app, account, cluster) of ``q``'s rows: the counted clusters
    (``view_clusters``) for the roles that make clusters; else one role at a time (within one
    role the app index gives them in order, with no sort)."""
    if set(q.roles or CLUSTER_ROLES) == set(CLUSTER_ROLES) and q == ViewQuery(
        roles=q.roles, app=q.app, account=q.account, cluster=q.cluster, clusters=True
    ):
        where, params = [], []
        for column, value in (("app", q.app), ("account", q.account), ("cluster", q.cluster)):
            if value is not None:
                where.append(f"{column}={d.mark}")
                params.append(value)
        rows = execute(
            "SELECT app, account, cluster FROM view_clusters"
            f" WHERE {' AND '.join(where) or d.true} ORDER BY app, account, cluster",
            params,
        )
        return [ViewRow(r[1], "", "", "", "", app=r[0], cluster=r[2]) for r in rows]
    found: set[tuple[str, str, str]] = set()
    for role in q.roles or CLUSTER_ROLES:
        rows = execute(*view_sql(d, replace(q, roles=(role,))))
        found.update((r[0], r[1], r[2]) for r in rows)
    return [ViewRow(account, "", "", "", "", app=app, cluster=cluster)
            for app, account, cluster in sorted(found)]  # fmt: skip


# -- search -----------------------------------------------------------------------------------


def _contains(d: SqlDialect, text: str) -> str:
    """A condition: ``text`` contains the next parameter, literally (no wildcards) and as it
    is: the caller lower-cases the query, and keys are matched as they are written, as
    Clouddriver's Redis cache matches ``*q*`` (``replicaset`` does not find ``replicaSet``)."""
    return f"instr({text}, ?) > 0" if d.name == "sqlite" else f"strpos({text}, %s) > 0"


class ClusterKeys:
    """The set of clusters as ``/search`` matches it (each with its cluster key, and the
    applications they name), kept by a reader between searches while the set's version
    (``view_state.clusters``, bumped by ``view_clusters``' triggers) is the same: each search
    read, sorted and keyed ~1,000 clusters again (a third of a search's CPU in bench_views)."""

    def __init__(self) -> None:
        self.version: object = None
        self.apps: frozenset[str] = frozenset()
        self.keyed: list[tuple[str, tuple[str, str, str]]] = []  # (key, triple), sorted

    def read(self, execute: Execute) -> None:
        """Bring it up to the version of the snapshot ``execute`` reads."""
        ((version,),) = execute("SELECT clusters FROM view_state", [])
        if version == self.version and self.version is not None:
            return
        rows = execute("SELECT app, account, cluster FROM view_clusters", [])
        triples = sorted({(r[1], r[0], r[2]) for r in rows})
        self.apps = frozenset(t[1] for t in triples)
        self.keyed = [(cluster_key(*t), t) for t in triples]
        self.version = version


def _linked(
    d: SqlDialect,
    execute: Execute,
    known: ClusterKeys,
    *,
    with_apps: bool,
    with_clusters: bool,
) -> tuple[list[str], list[tuple[str, tuple[str, str, str]]]]:
    """Every application (of an object linked to it) and every cluster with its key, as
    asked: the clusters from ``known`` (read again only when their set changed), the
    applications of load balancers and firewalls alone by a walk of the app index per role."""
    m = d.mark
    if not (with_apps or with_clusters):
        return [], []
    known.read(execute)
    apps: set[str] = set(known.apps)
    if with_apps:  # the applications of load balancers and firewalls alone
        for role in APP_ROLES:
            if role in CLUSTER_ROLES:
                continue
            apps.update(
                r[0]
                for r in execute(
                    f"SELECT DISTINCT v.app FROM view_index v WHERE v.role={m}"
                    f" AND v.{_NOT_PODS} AND v.app <> ''",
                    [role],
                )
            )
    return sorted(apps), known.keyed


@dataclass(frozen=True)
class SearchRequest:
    """What ``/search`` looks for: ``q`` (lower-cased) in the keys of the objects of
    ``kinds``, and in the application keys (``with_apps``) and cluster keys
    (``with_clusters``), with each matching application's clusters (``app_clusters``);
    each list of the answer at most ``limit`` long."""

    kinds: tuple[str, ...]
    q: str
    limit: int
    app_clusters: bool = False
    with_apps: bool = True
    with_clusters: bool = True


def search_hits(
    d: SqlDialect, execute: Execute, request: SearchRequest, known: ClusterKeys | None = None
) -> SearchHits:
    """The matches of a ``SearchRequest``. An object's key is matched in the key index, kind
    by kind; the (few thousand) applications and clusters are matched here (from ``known``,
    the caller's copy of the clusters of its store, when it keeps one)."""
    m = d.mark
    kinds, q, limit = request.kinds, request.q, request.limit
    kind_keys = sorted({k.lower() for k in kinds})
    row = "v.kind, v.account, v.namespace, v.name, v.role, v.app, v.cluster"
    direct: list[Any] = []
    if kind_keys:
        direct = execute(
            f"SELECT {row} FROM view_index v WHERE v.kind_key IN ({_marks(m, len(kind_keys))})"
            f" AND {_contains(d, 'v.search_key')} ORDER BY v.kind_key, v.search_key LIMIT {m}",
            [*kind_keys, q, limit],
        )
    # Only what the results can use (a search of pods links to neither).
    every_app, keyed = _linked(
        d,
        execute,
        known if known is not None else ClusterKeys(),
        with_apps=request.with_apps,
        with_clusters=request.with_clusters,
    )
    apps = [a for a in every_app if q in app_key(a)][:limit]
    clusters = [t for key, t in keyed if q in key][:limit]
    chosen = set(apps)
    of_apps = [t for _, t in keyed if t[1] in chosen][:limit] if request.app_clusters else []
    related: list[Any] = []
    if kind_keys and (apps or clusters):
        linked: list[str] = []
        params: list[Any] = [*kind_keys]
        if apps:
            linked.append(
                f"(v.role IN ({_marks(m, len(APP_ROLES))}) AND v.{_NOT_PODS}"
                f" AND v.app IN ({_marks(m, len(apps))}))"
            )
            params += [*APP_ROLES, *apps]
        if clusters:
            linked.append(
                f"(v.role IN ({_marks(m, len(CLUSTER_ROLES))}) AND v.{_NOT_PODS}"
                f" AND (v.account, v.app, v.cluster) IN"
                f" (VALUES {','.join([f'({_marks(m, 3)})'] * len(clusters))}))"
            )
            params += [*CLUSTER_ROLES, *(x for t in clusters for x in t)]
        related = execute(
            f"SELECT {row} FROM view_index v WHERE v.kind_key IN ({_marks(m, len(kind_keys))})"
            f" AND ({' OR '.join(linked)}) ORDER BY v.kind_key, v.search_key LIMIT {m}",
            [*params, limit],
        )
    return SearchHits(
        direct=[tuple(r) for r in direct],
        apps=apps,
        clusters=clusters,
        app_clusters=of_apps,
        related=[tuple(r) for r in related],
    )
