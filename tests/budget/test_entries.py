"""Entry validation and the coalescing merge table."""

from __future__ import annotations

import pytest

from budget import Entry, EntryKind, merge

A = EntryKind.UPSERT_ADDED
M = EntryKind.UPSERT_MODIFIED
D = EntryKind.DELETED
B = EntryKind.BARRIER
K = EntryKind.BOOKMARK


@pytest.mark.parametrize(
    ("old", "new", "merged"),
    [
        (A, M, A),  # ADDED then MODIFIED stays ADDED
        (A, A, A),
        (M, M, M),
        (M, A, A),
        (A, D, D),  # X then DELETED becomes DELETED
        (M, D, D),
        (D, D, D),
        (D, A, A),  # DELETED then ADDED/MODIFIED becomes ADDED
        (D, M, A),
        (K, K, K),  # bookmarks: newest wins
        (K, M, None),  # a bookmark never swallows an object event, nor the reverse
        (M, K, None),
    ],
)
def test_merge_table(old: EntryKind, new: EntryKind, merged: EntryKind | None) -> None:
    result = merge(Entry("k", old, 10, "old"), Entry("k", new, 3, "new"))
    if merged is None:
        assert result is None
    else:
        assert result is not None
        assert (result.key, result.kind, result.size, result.value) == ("k", merged, 3, "new")


def test_entry_normalises_an_int_kind() -> None:
    assert Entry(None, 4, 0, None).kind is B  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"kind": 9}, ValueError, "Entry.kind: 9 is not an EntryKind"),
        ({"size": -1}, ValueError, "Entry.size: must be >= 0, got -1"),
        ({"size": 1.5}, TypeError, "Entry.size: expected an int, got float"),
        ({"key": ["unhashable"]}, TypeError, "Entry.key: must be hashable, got list"),
    ],
)
def test_entry_rejects_bad_fields(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    fields: dict[str, object] = {"key": "k", "kind": A, "size": 1, "value": None}
    fields.update(kwargs)
    with pytest.raises(error, match=message):
        Entry(**fields)  # type: ignore[arg-type]
