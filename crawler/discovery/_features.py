"""State vectors from text: what a forager's URL ordering sees of a page or a link.

The paper's foragers reduce a page to the outputs of a small text classifier (§3.1.2). Without
a trained classifier we use the *hashing trick*: each word adds +-1 to one of ``dimensions``
components chosen by its xxhash (already a dependency; scikit-learn's HashingVectorizer does the
same but would be a large new dependency for ten lines), then ``tanh`` (as the paper maps its
classifier outputs into [-1, 1]) and scaling to unit length, so that the TD step ``alpha = 0.1``
is stable (see ``crawler.discovery._ordering``).
"""

from __future__ import annotations

import re

import numpy as np
import xxhash
from numpy.typing import NDArray

DIMENSIONS = 64
_WORD = re.compile(r"[^\W\d_]{2,}|\d+", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-case words (letters, or runs of digits) of ``text``."""
    return [w.lower() for w in _WORD.findall(text)]


def text_state(text: str, dimensions: int = DIMENSIONS) -> NDArray[np.float64]:
    """The unit-length hashed bag of words of ``text`` (all zeros for no words)."""
    vector = np.zeros(dimensions)
    for word in words(text):
        h = xxhash.xxh64_intdigest(word)
        vector[h % dimensions] += 1.0 if (h >> 63) & 1 else -1.0
    vector = np.tanh(vector)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
