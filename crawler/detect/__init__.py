"""Change detection: normalize a page to the content that matters, hash it, judge batches.

Only selectolax, xxhash and the standard library; nothing of the rest of the project.
"""

from crawler.detect._charset import decode
from crawler.detect._detector import ChangeDetector
from crawler.detect._hash import content_hash, raw_hash
from crawler.detect._judge import DetectItem, Verdict, judge
from crawler.detect._normalize import MAX_NORMALIZE_BYTES, content_kind, extract, normalize
from crawler.detect._rules import WatchRules

__all__ = [
    "MAX_NORMALIZE_BYTES",
    "ChangeDetector",
    "DetectItem",
    "Verdict",
    "WatchRules",
    "content_hash",
    "content_kind",
    "decode",
    "extract",
    "judge",
    "normalize",
    "raw_hash",
]
