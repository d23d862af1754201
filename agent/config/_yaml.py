"""The YAML loader of the agent's files (the config file, kubeconfigs): PyYAML's SafeLoader
with a bound on nesting.

Why. PyYAML composes nested nodes by recursion, so a document nested a few hundred levels
deep (``a: [[[[...``, 10 kB of brackets) ends in RecursionError instead of a clear error, and a
kubeconfig can come from outside the pod (a dynamic account's ``kubeconfigContents``). No
config or kubeconfig nests beyond a dozen levels; past ``MAX_YAML_DEPTH`` the loader raises
a ``yaml.MarkedYAMLError`` at the node, which the loaders report with its line and column.
"""

from __future__ import annotations

import yaml

__all__ = ["MAX_YAML_DEPTH", "BoundedLoader"]

MAX_YAML_DEPTH = 64


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents nesting deeper than MAX_YAML_DEPTH."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, f"the document nests deeper than {MAX_YAML_DEPTH} levels", mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
