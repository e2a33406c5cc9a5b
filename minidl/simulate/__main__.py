"""``python -m minidl.simulate lm|cnn [flags]`` (see ``minidl.simulate.cli``)."""

import sys

from minidl.simulate.cli import main

sys.exit(main())
