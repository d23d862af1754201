"""The data path: every kind of an account watched into the byte budget, in order.

``run_account`` (``_account``) discovers the kinds (``_discovery``) and runs a ``Reflector``
per kind and scope (``_reflector``): list (``_listing``), watch from the resourceVersion
(``_resourceversion``), decode lines (``_lines``), scrub Secrets (``_scrub``), retry
(``_retry``), tell the server of kinds gone or back (``_kind_availability``, ``_notices``).
"""

from ._account import AccountWatchStatus, ResumeKey, run_account
from ._discovery import (
    WELL_KNOWN_GROUPS,
    DiscoveryCache,
    DiscoveryResult,
    KindFilter,
    KindInfo,
    TargetDiff,
    WatchTarget,
    diff_targets,
    discover,
    lower_camel,
    select_targets,
)
from ._kind_availability import AvailabilityLog, Nudge
from ._lines import WatchDecoder, WatchEvent, decode_list_page
from ._list_caps import AccountListCaps, ListCaps
from ._notices import KindNotice, Notice, ScopeNotice, notice_messages
from ._reflector import Reflector
from ._reflector_values import BookmarkKey, ReflectorHooks, ReflectorSettings, ReflectorState
from ._scrub import Scrubber
from ._sync_progress import sync_progress

__all__ = [
    "WELL_KNOWN_GROUPS",
    "AccountListCaps",
    "AccountWatchStatus",
    "AvailabilityLog",
    "BookmarkKey",
    "DiscoveryCache",
    "DiscoveryResult",
    "KindFilter",
    "KindInfo",
    "KindNotice",
    "ListCaps",
    "Notice",
    "Nudge",
    "Reflector",
    "ReflectorHooks",
    "ReflectorSettings",
    "ReflectorState",
    "ResumeKey",
    "ScopeNotice",
    "Scrubber",
    "TargetDiff",
    "WatchDecoder",
    "WatchEvent",
    "WatchTarget",
    "decode_list_page",
    "diff_targets",
    "discover",
    "lower_camel",
    "notice_messages",
    "run_account",
    "select_targets",
    "sync_progress",
]
