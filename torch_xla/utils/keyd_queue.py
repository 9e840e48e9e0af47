"""torch_xla.utils.keyd_queue: bounded blocking queues that can be closed (the loaders use them)."""
import threading


class QueueBase:
    """A lock, two condition variables and the closed flags; get() returns None once
    the queue is closed and drained."""

    def __init__(self, maxsize=1024):
        self._maxsize = maxsize
        self._lock = threading.Lock()
        self._ready_cv = threading.Condition(self._lock)
        self._space_available_cv = threading.Condition(self._lock)
        self._close_write = False
        self._close_read = False

    @property
    def max_size(self):
        return self._maxsize

    def close(self):
        """Stop both readers and writers."""
        with self._lock:
            self._close_read = self._close_write = True
            self._ready_cv.notify_all()
            self._space_available_cv.notify_all()

    def close_write(self):
        """No more puts; readers drain what is there, then get None."""
        with self._lock:
            self._close_write = True
            self._ready_cv.notify_all()


class KeydQueue(QueueBase):
    """Items stored under keys; get(key) waits for that key."""

    def __init__(self, maxsize=1024):
        super().__init__(maxsize=maxsize)
        self._items = {}

    def put(self, key, item):
        with self._lock:
            while len(self._items) >= self._maxsize and not self._close_write:
                self._space_available_cv.wait()
            if self._close_write:
                return
            self._items[key] = item
            self._ready_cv.notify_all()

    def get(self, key):
        with self._lock:
            while key not in self._items and not self._close_read and not self._close_write:
                self._ready_cv.wait()
            if self._close_read:
                return None
            item = self._items.pop(key, None)
            if item is not None:
                self._space_available_cv.notify()
            return item


class Queue(QueueBase):
    """A FIFO queue."""

    def __init__(self, maxsize=1024):
        super().__init__(maxsize=maxsize)
        import collections
        self._items = collections.deque()

    def put(self, item):
        with self._lock:
            while len(self._items) >= self._maxsize and not self._close_write:
                self._space_available_cv.wait()
            if self._close_write:
                return
            self._items.append(item)
            self._ready_cv.notify()

    def get(self):
        with self._lock:
            while not self._items and not self._close_read and not self._close_write:
                self._ready_cv.wait()
            if self._close_read or not self._items:
                return None
            item = self._items.popleft()
            self._space_available_cv.notify()
            return item
