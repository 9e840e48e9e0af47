"""Small parsing helpers shared by the internal modules."""
import re


def parse_xla_device(device: str):
    """'TPU:3' -> ('TPU', 3); None when `device` is not of that form."""
    m = re.match(r"([A-Z]+):(\d+)$", device)
    if m:
        return m.group(1), int(m.group(2))
    return None
