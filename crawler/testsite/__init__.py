"""A local web site whose pages change at known rates: the ground truth for demos and tests.

Each page k changes in each site tick with probability p_k (Zipf by default, as in the
papers' environments). Every response carries rotating nonces (a script, a comment and a
CSRF input) that a good change detector must ignore. The site records which version of
each page it served to each poll, so a test can count the truly detected changes.
"""

from crawler.testsite._logged import LoggedSite, RequestLog, site_process
from crawler.testsite._pages import PageRenderer
from crawler.testsite._site import ChangingSite, SiteTruth, zipf_rates

__all__ = [
    "ChangingSite",
    "LoggedSite",
    "PageRenderer",
    "RequestLog",
    "SiteTruth",
    "site_process",
    "zipf_rates",
]
