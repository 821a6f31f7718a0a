"""Reading YAML with its expansion bounded: an alias bomb is refused in milliseconds.

YAML anchors and aliases (``&a`` / ``*a``) share one node, so a 1.3 KB file of nested aliases
composes instantly but stands for billions of values: whatever walks the result (validation,
JSON encoding of ``extra_body``, the manifest) takes minutes and gigabytes. :func:`load_bounded`
composes the document, counts the nodes it stands for once expanded (each node once, its
expanded size remembered, so the count costs the size of the file, not of the expansion) and
refuses more than :data:`MAX_EXPANDED_NODES`, or a recursive alias, naming the line.

Both it and :func:`load_plain` read through libyaml's parser (``yaml.CSafeLoader``) where PyYAML
was built with it: the same values, ~7x less CPU than the pure-Python parser (a worker reads
its scenario and each ``--set`` value at start-up: ~5 ms against ~0.7 ms for ``mix.yaml``).
"""

from __future__ import annotations

from typing import Any

import yaml

#: Values (scalars, lists, mappings) a scenario may stand for once its aliases are expanded. The
#: largest shipped scenario has a few hundred; datasets and traces live in their own files.
MAX_EXPANDED_NODES = 100_000

#: The safe loader: libyaml's parser with PyYAML's safe constructor when PyYAML has it.
SAFE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlTooLarge(ValueError):
    """The document expands to too many nodes (or refers to itself); ``line`` is 1-based."""

    def __init__(self, line: int, column: int, problem: str, got: str) -> None:
        super().__init__(f"line {line}, column {column}: {problem}")
        self.line, self.column, self.problem, self.got = line, column, problem, got


def expanded_size(root: yaml.Node, limit: int = MAX_EXPANDED_NODES) -> int:
    """Nodes ``root`` stands for with every alias expanded; :class:`YamlTooLarge` past ``limit``."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        if key in active:
            mark = node.start_mark
            raise YamlTooLarge(mark.line + 1, mark.column + 1, "an alias refers to the value that contains it",
                              "a recursive alias")
        total = 1
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            active.add(key)
            children = node.value if isinstance(node, yaml.SequenceNode) else [n for kv in node.value for n in kv]
            for child in children:
                total += size(child)
                if total > limit:
                    break
            active.discard(key)
        if total > limit:
            mark = node.start_mark  # the first (innermost) value to pass the limit
            raise YamlTooLarge(mark.line + 1, mark.column + 1,
                               "YAML aliases expand too far", "an alias bomb")
        sizes[key] = total
        return total

    return size(root)


def load_bounded(text: str) -> Any:
    """``yaml.safe_load(text)`` with the expansion bounded (:class:`YamlTooLarge`, a ValueError,
    beside ``yaml.YAMLError``); a nesting deeper than Python can follow is refused too."""
    loader = SAFE_LOADER(text)
    try:
        node = loader.get_single_node()  # composed, not built: aliases are still shared nodes
        if node is None:
            return None
        expanded_size(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlTooLarge(1, 1, "values nested too deep", "a nesting deeper than Python follows") from None
    finally:
        loader.dispose()


def load_plain(text: str) -> Any:
    """``yaml.safe_load(text)`` through :data:`SAFE_LOADER`, for text already bounded (a scenario
    file :func:`load_bounded` read) or short (a ``--set`` value)."""
    return yaml.load(text, Loader=SAFE_LOADER)  # a safe loader: no arbitrary objects
