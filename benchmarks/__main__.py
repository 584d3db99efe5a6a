"""``python -m benchmarks [--quick] [--suite shapes|overhead|peers|profile] ...``"""

import sys

from .cli import main

sys.exit(main())
