"""Helpers to keep an old public name working while pointing users to the new one."""
import functools
import logging

_log = logging.getLogger(__name__)


def deprecated(module, new, old_name=None):
    """A stand-in for `new` under the name `old_name` in `module`: each call logs
    a warning naming the old and the new function, then calls `new`."""
    old_name = old_name or new.__name__
    module_name = getattr(module, "__name__", str(module))

    @functools.wraps(new)
    def wrapper(*args, **kwargs):
        _log.warning("%s.%s is deprecated; use %s.%s instead.", module_name, old_name,
                     getattr(new, "__module__", module_name), new.__name__)
        return new(*args, **kwargs)
    return wrapper


def mark_deprecated(new):
    """Decorator: the decorated function is deprecated in favour of `new`; calls
    log a warning and run `new` (the decorated body is not run)."""
    def decorate(old):
        @functools.wraps(old)
        def wrapper(*args, **kwargs):
            _log.warning("%s.%s is deprecated; use %s.%s instead.", old.__module__,
                         old.__name__, getattr(new, "__module__", "?"), new.__name__)
            return new(*args, **kwargs)
        return wrapper
    return decorate
