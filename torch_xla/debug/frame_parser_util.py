"""torch_xla.debug.frame_parser_util: summarise the Python frames that debug output
(PT_XLA_DEBUG) prints for each compilation."""
import collections
import re

_FRAME = re.compile(r"^\s*(.+?) \((.+?):(\d+)\)\s*$")


def parse_frame_content(line):
    """'fn (file.py:12)' -> (fn, file.py, 12), or None."""
    m = _FRAME.match(line)
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


def parse_frames(lines):
    """Group the frame lines of a debug log into frames: lists of (fn, file, line)."""
    frames, current = [], []
    for line in lines:
        content = parse_frame_content(line)
        if content is not None:
            current.append(content)
        elif current:
            frames.append(current)
            current = []
    if current:
        frames.append(current)
    return frames


def create_report(frames):
    """Text counting each distinct frame (most frequent first)."""
    counts = collections.Counter(tuple(f) for f in frames)
    lines = []
    for frame, n in counts.most_common():
        lines.append(f"Frame count: {n}")
        lines += [f"  {fn} ({fname}:{ln})" for fn, fname, ln in frame]
    return "\n".join(lines)


def process_frames(fname):
    """create_report of a debug log file's frames."""
    with open(fname) as f:
        return create_report(parse_frames(f.readlines()))
