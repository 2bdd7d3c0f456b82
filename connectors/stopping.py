"""Stop requests: live inputs end, and sinks that wait on bytewax worker threads stop waiting.

``flowplanner run`` stops on SIGTERM/SIGINT by ending its inputs (:func:`end_inputs`): each
source raises ``StopIteration`` at its next read (:func:`inputs_ended`), so the dataflow
finishes as it does at the end of a recording — a window still open does not tick, the sinks
flush and close — and the runtime exits normally instead of unwinding its worker threads on an
interrupt.

SIGTERM/SIGINT run their Python handler on the main thread only, so a sink waiting on a worker
thread (for an unreachable broker, for a hung API server) never sees the interrupt. Such a sink
:func:`watch`-es itself while open and reads its ``stop_requested`` flag where it waits;
``flowplanner run``'s signal handler calls :func:`stop_waiting`, which sets that flag on every
sink still open. Setting a flag is all either does, so both are safe in a signal handler.

>>> class Waiting:
...     stop_requested = False
>>> sink = Waiting()
>>> watch(sink)
>>> stop_waiting()
>>> sink.stop_requested
True
>>> forget(sink)
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol

_INPUTS_END = threading.Event()


def end_inputs(ended: bool = True) -> None:
    """Every input ends at its next read (``ended=False``: a new run reads on)."""
    if ended:
        _INPUTS_END.set()
    else:
        _INPUTS_END.clear()


def inputs_ended() -> bool:
    """A stop was requested: a source's next read raises ``StopIteration``.

    >>> end_inputs(); inputs_ended()
    True
    >>> end_inputs(False); inputs_ended()
    False
    """
    return _INPUTS_END.is_set()


class Stoppable(Protocol):
    """A sink that waits on a worker thread and reads this flag where it waits.

    >>> class Sink:
    ...     stop_requested = False
    >>> stoppable: Stoppable = Sink()
    """

    stop_requested: bool


_open: dict[int, weakref.ref[Stoppable]] = {}
"""The sinks built and not closed yet (what :func:`stop_waiting` reaches)."""


def watch(sink: Stoppable) -> None:
    """Let :func:`stop_waiting` reach ``sink`` (an object with a ``stop_requested`` flag) until
    it is forgotten or garbage."""
    key = id(sink)
    _open[key] = weakref.ref(sink, lambda _: _open.pop(key, None))


def forget(sink: Stoppable) -> None:
    """``sink`` is closed: a later stop request no longer concerns it."""
    _open.pop(id(sink), None)


def stop_waiting() -> None:
    """A stop was requested: every open sink stops waiting (sets its ``stop_requested``)."""
    for ref in list(_open.values()):  # one C-level copy: atomic under the GIL
        if (sink := ref()) is not None:
            sink.stop_requested = True
