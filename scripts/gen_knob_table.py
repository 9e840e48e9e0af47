"""Write docs/reference/knobs.md from the knob declarations (torch_xla/engine/base/config.py).

    python scripts/gen_knob_table.py           # rewrite docs/reference/knobs.md
    python scripts/gen_knob_table.py --check   # exit 1 when docs/reference/knobs.md is stale

config.py imports only the standard library, so it is loaded from its file:
neither torch nor JAX is needed (nor started) to write the page.
"""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "torch_xla", "engine", "base", "config.py")
PAGE = os.path.join(ROOT, "docs", "reference", "knobs.md")


def load_config():
    spec = importlib.util.spec_from_file_location("_torch_xla_knobs", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv):
    text = load_config().markdown()
    if argv == ["--check"]:
        with open(PAGE) as f:
            if f.read() != text:
                sys.exit(f"{PAGE} is stale: run python scripts/gen_knob_table.py")
        return
    if argv:
        sys.exit(__doc__)
    with open(PAGE, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
