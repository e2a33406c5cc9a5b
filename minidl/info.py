"""``python -m minidl.info``: the entry point kept at its old name; the tool is minidl/tools/info.py."""

import sys

from minidl.tools import info

if __name__ == "__main__":
    info.main()
else:
    sys.modules[__name__] = info  # ``import minidl.info`` is the tool's module itself
