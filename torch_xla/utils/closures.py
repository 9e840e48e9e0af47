"""torch_xla.utils.closures: how step closures run (synchronously, or on a background thread)."""
import queue
import threading


class ClosureHandler:
    """Runs closures in the calling thread."""

    def __init__(self):
        pass

    def run(self, closure):
        closure()

    def run_all(self, closures):
        for closure in closures:
            self.run(closure)


class AsyncClosureHandler(ClosureHandler):
    """Runs closures in order on one daemon thread; an exception is re-raised by the
    next run() call."""

    def __init__(self, max_queue_size=100):
        super().__init__()
        self._queue = queue.Queue(max_queue_size)
        self._error = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def start_event_loop(self):
        with self._lock:
            if self._thread is not None:
                return

            def loop():
                while True:
                    closure = self._queue.get()
                    try:
                        closure()
                    except Exception as e:  # noqa: BLE001  (handed to the caller)
                        self._error.put(e)
                    finally:
                        self._queue.task_done()

            self._thread = threading.Thread(target=loop, daemon=True)
            self._thread.start()

    def run(self, closure):
        if not self._error.empty():
            e = self._error.get()
            raise RuntimeError(f"an asynchronous step closure raised {type(e).__name__}: {e}; "
                               "later asynchronous closures are not run") from e
        self.start_event_loop()
        self._queue.put(closure)
