"""``python -m minidl.plot``: the entry point kept at its old name; the tool is minidl/tools/plot.py."""

import sys

from minidl.tools import plot

if __name__ == "__main__":
    sys.exit(plot.main())
else:
    sys.modules[__name__] = plot  # ``import minidl.plot`` is the tool's module itself
