"""The histogram bucket scheme shared by the live statistics and the analysis.

One scheme, so a live histogram merged on the master and the store's per-step histograms
report the same value for the same latency. Bucket ``k >= 0`` holds ``[1.01**k, 1.01**(k+1))``
microseconds; bucket ``-1`` holds values below 1 us. A bucket reports its geometric middle, so
any value is reported within :data:`RELATIVE_PRECISION` (just under 0.5 %) of itself.
"""

from __future__ import annotations

import math

#: Ratio between consecutive bucket bounds.
BUCKET_BASE = 1.01
LOG_BASE = math.log(BUCKET_BASE)
INV_LOG_BASE = 1.0 / LOG_BASE
#: The bucket of values below 1 us (reported as 0).
ZERO_BUCKET = -1
#: Largest relative distance of a bucket's reported value (its geometric middle) from any value
#: in the bucket: ``sqrt(1.01) - 1``, just under 0.5 %.
RELATIVE_PRECISION = math.sqrt(BUCKET_BASE) - 1.0


def bucket_of_us(us: float) -> int:
    """The bucket key of one value in microseconds."""
    return int(math.log(us) / LOG_BASE) if us >= 1.0 else ZERO_BUCKET


def bucket_value_ms(key: int) -> float:
    """The value a bucket reports (ms): its geometric middle, 0 for the below-1-us bucket."""
    return 0.0 if key == ZERO_BUCKET else (BUCKET_BASE ** (key + 0.5)) / 1000.0
