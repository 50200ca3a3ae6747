"""Checkpoint namespaces of every shape: the ``checkpoint_ns`` a saver must keep apart.

LangGraph keeps a subgraph's checkpoints in the namespace of the task that runs it:
``node:task_id`` (`NS_END` between the node's name and the task's id), and a subgraph of
a subgraph joins its parent's namespace with `NS_SEP`: ``parent:1|child:2``. A node's name
is the application's (``research_agent``, ``Ask user?``): LangGraph refuses ``|`` and
``:`` in it, nothing else. So a thread holds the root namespace (``""``) beside its
subgraphs' and their nested subgraphs', and namespaces that share a prefix (``p:1`` and
``p:10``, a parent ``p:1`` and its nested ``p:1|c:2``). A saver that finds a namespace by
key prefix reaches the nested ones; one that hands it unescaped to a query language reads
``|`` as OR (RediSearch's TAG query), ``_`` and ``%`` as wildcards (SQL ``LIKE``), ``*``
and ``?`` as a glob's. Such a saver answers one namespace with another's checkpoints.

The ``namespaces`` matrix has a row per method and a column per shape
(`NAMESPACE_COLUMNS`): ``root``, ``child`` (one level), ``nested`` (two or more),
``prefix twins`` (marked while another namespace of the same thread, known to the same
location, begins with this one or this one with it: both were there) and ``query
syntax`` (characters a query or a path reads). The sweep puts each group of
`NAMESPACE_GROUPS` in a thread of its own.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "NAMESPACE_COLUMNS",
    "NAMESPACE_GROUPS",
    "NS_END",
    "NS_SEP",
    "NamespaceShapes",
    "shapes_of",
]

NS_SEP: Final = "|"
"""LangGraph's separator of a nested namespace's levels (``langgraph._internal._constants``)."""
NS_END: Final = ":"
"""LangGraph's separator of a node's name and its task's id in one level."""

NAMESPACE_COLUMNS: Final = ("root", "child", "nested", "prefix twins", "query syntax")
"""The columns of ``namespaces``: the shape of the namespace a call names."""

_DEEP: Final = NS_SEP.join(
    f"agent_{level}{NS_END}1f0c7e2a-9d4b-6c1e-8000-{level:012d}" for level in range(6)
)
"""Six levels of subgraphs, each ``node:task_id`` as LangGraph names them (269
characters): the common part of the ``deep twins``, which differ past 255."""

NAMESPACE_GROUPS: Final[dict[str, tuple[str, ...]]] = {
    "nested": ("", "p:1", "p:1|c:2", "p:1|c:2|g:3"),
    "prefix twins": ("", "p:1", "p:10", "p:10|c:2", "p:10|c:20"),
    "deep twins": ("", f"{_DEEP}|leaf:1", f"{_DEEP}|leaf:2"),
    "query syntax": (
        "agent_1:t",
        "agentX1:t",
        "a%:t",
        "a*:t",
        "a?:t",
        "[a]:t",
        "a.b:t",
        "a-b:t",
        "Ask user:t",
        "it's:t",
        '"q":t',
        "a@b:t",
        "{a}:t",
        "(a):t",
        "a/b:t",
        "a\\b:t",
        "a,b:t",
    ),
}
"""Namespaces the sweep puts side by side in one thread, per group: a root beside its
subgraph, that subgraph's nested one and a grandchild; siblings sharing a prefix (``p:1``,
``p:10``, and ``c:2``, ``c:20`` nested in ``p:10``); two namespaces seven levels deep that
differ only in their last level, past their first 255 characters (a ``VARCHAR(255)``
column that cuts, an index on a prefix); node names holding wildcards
(``agent_1`` and ``agentX1`` are ``LIKE`` twins), quotes, a space, path separators and
RediSearch's syntax."""

_QUERY: Final = frozenset("_%*?[]{}().'\"@-/\\, ;!#&=~<>$^+")


def shapes_of(ns: str) -> set[str]:
    """The columns of ``ns`` on its own (not ``prefix twins``)."""
    shapes = {"root" if not ns else "nested" if NS_SEP in ns else "child"}
    if _QUERY & set(ns):
        shapes.add("query syntax")
    return shapes


class NamespaceShapes:
    """The namespaces of each thread of one location, and the columns of each: its shape,
    and ``prefix twins`` once a namespace it begins, or that begins it, is known."""

    def __init__(self) -> None:
        self._known: dict[str, dict[str, set[str]]] = {}  # thread -> namespace -> columns

    def columns(self, thread: str, ns: str) -> set[str]:
        """The columns of ``ns`` of ``thread``, which is known from now on."""
        known = self._known.setdefault(thread, {})
        mine = known.get(ns)
        if mine is not None:
            return mine
        mine = shapes_of(ns)
        for other, theirs in known.items():
            if ns and other and (ns.startswith(other) or other.startswith(ns)):
                mine.add("prefix twins")
                theirs.add("prefix twins")
        known[ns] = mine
        return mine
