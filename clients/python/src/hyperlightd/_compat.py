"""What differs between the Python versions this package supports."""

import sys

if sys.version_info >= (3, 11):
    from typing import Unpack as Unpack
else:
    from typing_extensions import Unpack as Unpack
