"""``python -m minidl.launch``: the entry point kept at its old name; the tool is minidl/tools/launch.py."""

import sys

from minidl.tools import launch

if __name__ == "__main__":
    sys.exit(launch.main())
else:
    sys.modules[__name__] = launch  # ``import minidl.launch`` is the tool's module itself
