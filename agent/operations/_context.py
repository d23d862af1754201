"""What every operation handler gets: the account's cluster, its description, its outcome."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import ServerSideApplyConfig
from ._description import Description
from ._kube import Cluster
from ._outcome import Outcome

__all__ = ["OperationContext", "OperationSettings"]


@dataclass(frozen=True, slots=True)
class OperationSettings:
    """Knobs of the executor's handlers.

    ``server_side_apply`` is ``kubernetes.serverSideApply``; ``field_manager`` names the
    agent in managedFields; ``recreate_wait_seconds`` bounds how long a recreate waits for
    the old object to disappear; ``strip_managed_fields`` is
    ``kubernetes.stripManagedFields``, applied to the objects a result reports.
    """

    server_side_apply: ServerSideApplyConfig = field(default_factory=ServerSideApplyConfig)
    field_manager: str = "spinnaker"
    recreate_wait_seconds: float = 60.0
    recreate_poll_seconds: float = 0.2
    strip_managed_fields: bool = True


@dataclass(slots=True)
class OperationContext:
    cluster: Cluster
    description: Description
    outcome: Outcome
    settings: OperationSettings

    @property
    def account(self) -> str:
        return self.cluster.account
