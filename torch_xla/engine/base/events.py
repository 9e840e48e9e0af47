"""Engine events: the executor says what happens, observers subscribe.

    events.subscribe("compiled", fn)      # fn(**payload)
    if events.wanted("compiled"):         # free when nobody listens
        events.emit("compiled", graph=g, executable=exe)

Kinds the executor emits (see lazy/executor.py): `captured` (a graph is about
to be compiled or run), `compile_begin`, `compiled`, `executed`, `failed`
(stage, error: a subscriber may return a note to attach to the error),
`barrier` (after a full sync); lazy/transfers.py emits `transferred` (direction,
shape, dtype, nbytes, devices) for each host<->device copy. The runtime emits `job_started` once a
multi-process job is joined. Subscribers run synchronously in the emitting
thread, in subscription order.
"""
_subs = {}


def subscribe(kind, fn):
    """Call fn(**payload) on every `kind` event; returns fn (usable as a decorator)."""
    lst = _subs.setdefault(kind, [])
    if fn not in lst:
        lst.append(fn)
    return fn


def unsubscribe(kind, fn):
    lst = _subs.get(kind)
    if lst and fn in lst:
        lst.remove(fn)
        if not lst:
            del _subs[kind]


def wanted(kind):
    """True when someone listens to `kind` (check before building a payload)."""
    return kind in _subs


def emit(kind, **payload):
    """Call every subscriber of `kind`; -> their non-None results."""
    subs = _subs.get(kind)
    if not subs:
        return ()
    out = []
    for fn in tuple(subs):
        r = fn(**payload)
        if r is not None:
            out.append(r)
    return out
