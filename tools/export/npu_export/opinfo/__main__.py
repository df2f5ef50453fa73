"""``python -m npu_export.opinfo {export,run} [--write] [--ci] ...``: see `suite`."""

import sys

from .suite import main

if __name__ == "__main__":
    sys.exit(main())
