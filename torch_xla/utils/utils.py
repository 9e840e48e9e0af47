"""torch_xla.utils.utils: small helpers upstream scripts import."""
import torch


class SampleGenerator:
    """Yields the same `data` sample_count times: a synthetic data loader.

    Upstream's examples use it as `SampleGenerator(data=(x, y), sample_count=n)`
    in place of a DataLoader when --fake_data is set."""

    def __init__(self, data, sample_count):
        self._data = data
        self._sample_count = sample_count
        self._count = 0

    def __iter__(self):
        return SampleGenerator(self._data, self._sample_count)

    def __len__(self):
        return self._sample_count

    def __next__(self):
        return self.next()

    def next(self):
        if self._count >= self._sample_count:
            raise StopIteration
        self._count += 1
        return self._data


def get_free_tcp_ports(n=1):
    """n free TCP ports on this host."""
    import socket
    ports, socks = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def getenv_as(name, to_type, defval=None):
    import os
    env = os.environ.get(name)
    return defval if env is None else to_type(env)


del torch
