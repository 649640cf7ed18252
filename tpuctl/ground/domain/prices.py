"""Vertex AI custom-training prices: a dated, deliberately small table, and what tpuctl does NOT know.

Source: Google's Vertex AI pricing page, section "Custom-trained models" → training
(https://cloud.google.com/vertex-ai/pricing; Google now also serves it at
https://cloud.google.com/products/gemini-enterprise-agent-platform/pricing). USD per hour, list price,
no savings-plan/committed-use discount, no taxes.

How the numbers got here (2026-11-22): Google's page itself could not be read from this workplace (only
its opening paragraphs are stored in the search corpus, not the per-region tables). Every number below
is therefore taken from public transcriptions of that page that quote it verbatim, with their read date;
``PRICE_RECORDS`` keeps the quoted text and where it was read, and ``tests/ops/tune/test_prices.py`` checks
that every table entry is exactly a recorded quote (and every quote is in the table). An entry nobody
quoted is NOT in the table: an estimate that needs it says which entry is missing instead of guessing.

Known gaps (2026-11-22): no europe-west4 entry, no GPU/TPU accelerator entry per region, no Spot price.
Add one by appending a ``PriceRecord`` (quote, source, date) and the matching ``TRAINING_PRICES`` entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpuctl.ground.errors import DomainError

PRICES_SOURCE_URL = "https://cloud.google.com/vertex-ai/pricing"
#: When this table was assembled from the records below (each record has its own read date).
PRICES_CHECKED = "2026-11-22"
PRICE_ON_DEMAND = "on-demand"
PRICE_SPOT = "spot"


@dataclass(frozen=True)
class PriceRecord:
    """One price as quoted from Google's page: the text, where it was read, and when."""

    region: str
    item: str          # a machine type (n1-standard-4) or an aiplatform AcceleratorType name (NVIDIA_TESLA_T4)
    kind: str          # PRICE_ON_DEMAND or PRICE_SPOT
    quote: str         # the price text as it appears on Google's page
    read_from: str     # the page the quote was read from (Google's, or a transcription that cites it)
    read_on: str       # YYYY-MM-DD


PRICE_RECORDS: tuple[PriceRecord, ...] = (
    # "The public custom-training pricing table lists n1-standard-4 in Iowa (us-central1) at
    #  $0.21849885/hour without a savings-plan discount, checked September 6, 2026" — and the same figure,
    #  "n1-standard-4, us-central1, tabela Default, 2026-09-08", and "Custom training n1-standard-4:
    #  $0.21849885 / 1 hour", read 2026-10-07, "found verbatim in the fetched page text"
    #  (github.com/api-evangelist/google-vertex-ai plans/google-vertex-ai-plans-pricing.yml). Three
    #  independent reads of Google's page, one number.
    PriceRecord("us-central1", "n1-standard-4", PRICE_ON_DEMAND, "$0.21849885 / 1 hour",
                "https://cloud.google.com/products/gemini-enterprise-agent-platform/pricing "
                "(as quoted in github.com/api-evangelist/google-vertex-ai "
                "plans/google-vertex-ai-plans-pricing.yml)", "2026-10-07"),
)


@dataclass(frozen=True)
class HourlyPrice:
    usd: float
    record: PriceRecord


_QUOTE = re.compile(r"^\$(?P<usd>\d+(?:\.\d+)?) / 1 hour$")


def quoted_usd(quote: str) -> float:
    """The USD number of a ``$0.21849885 / 1 hour`` quote."""
    m = _QUOTE.match(quote.strip())
    if not m:
        raise DomainError(f"price quote {quote!r} is not of the form '$N / 1 hour'")
    return float(m.group("usd"))


#: (region, item, kind) -> USD per hour. Written out (not computed from the records) so a change to either
#: side shows in review; the test keeps both in step.
TRAINING_PRICES: dict[tuple[str, str, str], float] = {
    ("us-central1", "n1-standard-4", PRICE_ON_DEMAND): 0.21849885,
}


def price_regions() -> list[str]:
    return sorted({region for region, _, _ in TRAINING_PRICES})


def training_price(region: str, item: str, kind: str = PRICE_ON_DEMAND) -> HourlyPrice:
    """USD per hour of one replica's ``item`` (machine type, or one accelerator) in ``region``.

    Raises DomainError naming what is missing: an unknown region or item is never guessed.
    """
    if kind not in (PRICE_ON_DEMAND, PRICE_SPOT):
        raise DomainError(f"price kind must be {PRICE_ON_DEMAND} or {PRICE_SPOT} (got {kind!r})")
    key = (region, item, kind)
    if key in TRAINING_PRICES:
        record = next(r for r in PRICE_RECORDS if (r.region, r.item, r.kind) == key)
        return HourlyPrice(TRAINING_PRICES[key], record)
    if region not in price_regions():
        raise DomainError(
            f"no Vertex AI training prices for region {region} in tpuctl's price table (checked {PRICES_CHECKED}; "
            f"it has {', '.join(price_regions())}); see {PRICES_SOURCE_URL}")
    raise DomainError(
        f"no {kind} Vertex AI training price for {item} in {region} in tpuctl's price table (checked "
        f"{PRICES_CHECKED}); see {PRICES_SOURCE_URL}")
