"""Prices for estimates: the Cloud Billing Catalog (``refresh`` and a dated cache), the shipped snapshot, and the
hourly price of a Vertex AI worker pool or a TPU VM slice with the source and date it came from.

Where a price comes from, in order (``load_prices``):
1. the cache ``<tpuctl cache>/prices/catalog.json`` when it is younger than ``FRESH_FOR``;
2. a refresh (``CloudCatalogClient``: ``services.list`` to find the services by display name, ``services.skus.list``
   for each, only the SKUs ``domain.wanted`` keeps) when credentials are at hand — an endpoint redirect
   (``TPUCTL_CLOUDBILLING_ENDPOINT``), ``GOOGLE_APPLICATION_CREDENTIALS`` or gcloud's application-default file —
   given at most ``REFRESH_WAIT_SECONDS``: an estimate never waits longer for it;
3. the cache however old (its date is printed);
4. the snapshot shipped in the repository (``domain.load_snapshot``) — TPU VM slices only: it holds Compute
   Engine / Cloud TPU prices, not Vertex AI training prices;
5. otherwise "unknown", naming ``tpuctl prices refresh``.
One estimate line names one source; a TPU VM price taken from the snapshot because the cached catalogue had no
matching SKU says so.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from cloud.clients import as_user_error, base_url, endpoint_for, gapic, google_errors
from cloud.google import billing_v1
from ground import domain
from ground.envs import cache_dir
from ground.errors import DomainError, UserError, validation_problem
from ground.files import read_file, write_atomically

#: A cache younger than this is used without asking Google again (list prices change rarely, and are dated).
FRESH_FOR = timedelta(days=7)
#: The longest an estimate waits for an automatic refresh.
REFRESH_WAIT_SECONDS = 4.0
#: SKUs per page (services.skus.list accepts up to 5000).
PAGE_SIZE = 5000
CACHE_VERSION = 1
#: The cache holds the SKUs tpuctl can use (a few thousand at most, well under a megabyte); anything much bigger is
#: not its cache and is never read whole.
MAX_CACHE_BYTES = 32 * 1024 * 1024
#: Pages of one listing before the refresh gives up (at PAGE_SIZE 5000 SKUs each: far more than any service has).
MAX_PAGES = 200


def cache_path() -> Path:
    return cache_dir() / "prices" / "catalog.json"


@dataclass(frozen=True)
class Catalogue:
    """The SKUs tpuctl keeps of the Cloud Billing Catalog, and when and where they were read."""
    skus: tuple[domain.SkuRecord, ...]
    fetched: datetime                   # UTC
    endpoint: str                       # cloudbilling.googleapis.com, or the redirect
    services: dict[str, str] = field(default_factory=dict)   # key -> service id found by display name

    @property
    def date(self) -> str:
        return self.fetched.strftime("%Y-%m-%d %H:%M UTC")

    @property
    def label(self) -> str:
        return f"Cloud Billing Catalog ({self.endpoint}), fetched {self.date}"

    def age(self, now: datetime | None = None) -> timedelta:
        return (now or datetime.now(UTC)) - self.fetched

    def to_json(self) -> dict:
        return {"version": CACHE_VERSION, "fetched": self.fetched.isoformat(), "endpoint": self.endpoint,
                "services": self.services, "skus": [asdict(s) for s in self.skus]}

    @classmethod
    def from_json(cls, raw: bytes | str) -> Catalogue:
        """The cache file's bytes, validated by shape (``_CacheFile``) before anything is built of them; a file of
        another shape, a price out of its bounds or a date without a time zone is a ValueError naming what."""
        try:
            doc = _CacheFile.model_validate_json(raw)
        except ValidationError as exc:
            raise ValueError(validation_problem(exc)) from None
        skus = tuple(domain.SkuRecord(**{**s.model_dump(), "regions": tuple(s.regions)}) for s in doc.skus)
        for sku in skus:    # read back with the bound it was written with: a bad price makes the cache unusable
            problem = domain.price_problem(sku)
            if problem:
                raise ValueError(problem)
        return cls(skus, doc.fetched, doc.endpoint, dict(doc.services))


class _Cached(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _CachedSku(_Cached):
    """One SKU as ``Catalogue.to_json`` writes it (``domain.SkuRecord``'s fields)."""
    sku_id: str = Field(max_length=200)
    description: str = Field(max_length=2000)
    service: str = Field(max_length=100)
    resource_family: str = Field(max_length=200)
    resource_group: str = Field(max_length=200)
    usage_type: str = Field(max_length=200)
    regions: list[Annotated[str, Field(max_length=100)]] = Field(max_length=1000)
    usd: float
    unit: str = Field(max_length=100)


class _CacheFile(_Cached):
    """The prices cache as ``Catalogue.to_json`` writes it: read back by this shape, or not at all."""
    version: Literal[CACHE_VERSION]
    fetched: AwareDatetime
    endpoint: str = Field(max_length=500)
    services: dict[str, Annotated[str, Field(max_length=200)]] = Field(default_factory=dict, max_length=100)
    skus: list[_CachedSku] = Field(max_length=200_000)


_UNUSABLE = "the prices cache "


def read_cache() -> Catalogue | None:
    """The cached catalogue; None when there is none or it cannot be used (``cache_state`` says why)."""
    return cache_state()[0]


def cache_state() -> tuple[Catalogue | None, str | None]:
    """(the cached catalogue or None, why a cache file that is there cannot be used or None). Read bounded and
    non-blocking (``ground.files.read_file``): a FIFO or a device in its place (a link to /dev/zero) is never waited
    on or read, a file over ``MAX_CACHE_BYTES`` never parsed, a file of another shape never used."""
    path = cache_path()
    if not os.path.lexists(path):
        return None, None
    try:
        data = read_file(path, "prices cache", MAX_CACHE_BYTES, hint=f"`{domain.REFRESH_COMMAND}` writes it again")
    except UserError as exc:            # not a file, too large: its line names the file and the remedy already
        return None, f"{_UNUSABLE}{str(exc)[:400]}"
    try:
        return Catalogue.from_json(data), None
    except ValueError as exc:
        return None, f"{_UNUSABLE}{path} is not usable ({str(exc)[:200]}); `{domain.REFRESH_COMMAND}` writes it again"


def write_cache(catalogue: Catalogue, path: Path | None = None) -> Path:
    """Write the cache atomically: a reader sees the old file or the new one, never half of one."""
    return write_atomically(path or cache_path(), json.dumps(catalogue.to_json(), indent=1))


# --------------------------------------------------------------------------------------------
# Refresh
# --------------------------------------------------------------------------------------------

def catalog_client():
    return gapic(billing_v1.CloudCatalogClient, "cloudbilling")


def sku_record(sku, service: str) -> domain.SkuRecord | None:
    """A billing_v1 ``Sku`` as tpuctl keeps it: the first-tier USD price of its newest pricing; None when it has
    no USD hourly-style price (another currency, no pricing info)."""
    if not sku.pricing_info:
        return None
    expression = sku.pricing_info[0].pricing_expression
    tiers = sorted(expression.tiered_rates, key=lambda t: t.start_usage_amount)
    if not tiers:
        return None
    money = tiers[0].unit_price
    if money.currency_code and money.currency_code != "USD":
        return None
    category = sku.category
    return domain.SkuRecord(sku.sku_id, sku.description, service, category.resource_family,
                            category.resource_group, category.usage_type, tuple(sku.service_regions),
                            money.units + money.nanos / 1e9, expression.usage_unit)


def _items(pager, field: str, what: str):
    """The items of a listing, page by page, bounded: a page token seen before (a server that pages in a circle) or
    more than ``MAX_PAGES`` pages is one line, not a refresh that never ends."""
    seen: set[str] = set()
    for number, page in enumerate(pager.pages, 1):
        yield from getattr(page, field)
        token = page.next_page_token
        if token and (token in seen or number >= MAX_PAGES):
            why = "repeated a page token" if token in seen else f"went on past {MAX_PAGES} pages"
            raise UserError(f"the Cloud Billing catalogue {why} while listing {what}; nothing was cached, try "
                            "again later", 1)
        seen.add(token)


def fetch_catalogue(client=None, *, now: datetime | None = None) -> Catalogue:
    """Read the services tpuctl launches on and keep the SKUs it can use; raises UserError (one line)."""
    client = client or catalog_client()
    with google_errors("reading the Cloud Billing catalogue (services.list)", exit_code=1):
        listed = {s.service_id: s.display_name
                  for s in _items(client.list_services(request={"page_size": PAGE_SIZE}), "services", "services.list")}
    by_name = {name: service_id for service_id, name in listed.items()}
    services = {}
    for key, name in domain.CATALOG_SERVICES.items():
        service_id = domain.CATALOG_SERVICE_IDS[key]
        if service_id not in listed:        # an id gone: the name is the fallback
            service_id = by_name.get(name)
        if service_id is None:
            raise UserError(f"the Cloud Billing catalogue has no service {domain.CATALOG_SERVICE_IDS[key]} nor one "
                            f"named {name!r} (it lists {len(listed)} services); Google may have renamed it: please "
                            "report it", 1)
        services[key] = service_id
    kept: list[domain.SkuRecord] = []
    for key, service_id in services.items():
        with google_errors(f"reading the SKUs of {domain.CATALOG_SERVICES[key]} (services/{service_id})", exit_code=1):
            for sku in _items(client.list_skus(request={"parent": f"services/{service_id}", "page_size": PAGE_SIZE}),
                              "skus", f"services/{service_id}/skus"):
                record = sku_record(sku, key)
                if record is not None and domain.wanted(record):
                    problem = domain.price_problem(record)
                    if problem:
                        raise UserError(f"the Cloud Billing catalogue's {problem}; nothing was cached (estimates "
                                        "and --budget keep the previous prices): please report it", 1)
                    kept.append(record)
    endpoint = base_url("cloudbilling").split("://", 1)[-1]
    return Catalogue(tuple(kept), now or datetime.now(UTC), endpoint, services)


def refresh(client=None, path: Path | None = None) -> tuple[Catalogue, Path]:
    """``tpuctl prices refresh``: fetch and write the dated cache (to ``path``, default ``cache_path()``)."""
    catalogue = fetch_catalogue(client)
    return catalogue, write_cache(catalogue, path)


def credentials_at_hand() -> bool:
    """True when a refresh can be tried without probing anything slow (no metadata-server lookup)."""
    if endpoint_for("cloudbilling"):
        return True
    adc = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if adc:
        return Path(adc).is_file()
    config = os.environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    return (Path(config) / "application_default_credentials.json").is_file()


def bounded_refresh(wait: float | None = None) -> tuple[Catalogue | None, str]:
    """Try ``refresh`` for at most ``wait`` seconds: (catalogue, "") or (None, why not). The attempt runs in a
    daemon thread; one that has not finished is abandoned (it writes the cache if it ever completes)."""
    wait = REFRESH_WAIT_SECONDS if wait is None else wait
    box: dict = {}
    path = cache_path()     # decided now: an attempt that finishes late still writes where this run reads

    def attempt() -> None:
        try:
            box["catalogue"] = refresh(path=path)[0]
        except Exception as exc:  # noqa: BLE001 - any failure only means "no fresh prices"; it is reported
            box["error"] = exc

    worker = threading.Thread(target=attempt, name="tpuctl-prices-refresh", daemon=True)
    worker.start()
    worker.join(wait)
    if "catalogue" in box:
        return box["catalogue"], ""
    if "error" in box:

        error = as_user_error(box["error"]) or box["error"]
        first = (str(error).splitlines() or [type(error).__name__])[0]
        return None, f"refreshing the price catalogue failed ({first})"
    return None, f"refreshing the price catalogue did not finish within {wait:g} s"


@dataclass
class Prices:
    """What estimates read: the catalogue (or None), the shipped snapshot, and notes on how they were chosen."""
    catalogue: Catalogue | None
    snapshot: domain.Snapshot
    notes: list[str] = field(default_factory=list)


def load_prices(*, wait: float | None = None, now: datetime | None = None) -> Prices:
    cached, problem = cache_state()
    snapshot = domain.load_snapshot()
    if cached is not None and cached.age(now) <= FRESH_FOR:
        return Prices(cached, snapshot)
    notes: list[str] = [problem] if problem else []
    if credentials_at_hand():
        fresh, why = bounded_refresh(wait)
        if fresh is not None:
            return Prices(fresh, snapshot)
        notes.append(why)
    if cached is not None:
        notes.append(f"the cached catalogue is {cached.age(now).days} days old; `{domain.REFRESH_COMMAND}` updates it")
    return Prices(cached, snapshot, notes)


# --------------------------------------------------------------------------------------------
# Hourly prices
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Component:
    label: str          # "8 vCPU × N1 vCPU"
    quantity: float
    unit_usd: float
    per: str            # "vCPU-hour"
    sku: str            # the SKU description, or the snapshot row it came from

    @property
    def usd(self) -> float:
        return self.quantity * self.unit_usd


@dataclass(frozen=True)
class Hourly:
    """USD per hour of one replica or one slice, component by component, from one named source."""
    components: tuple[Component, ...]
    source: str
    note: str = ""

    @property
    def usd(self) -> float:
        return sum(c.usd for c in self.components)


def _component(skus, want: domain.SkuWant, region: str, spot: bool, quantity: float, label: str) -> Component:
    sku = domain.match_sku(skus, want, region, spot)
    return Component(label, quantity, sku.usd, want.per, f"{sku.sku_id} {sku.description}")


def _vertex_tpu(machine_type: str, accelerator_type: str | None, accelerator_count: int = 0,
                topology: str | None = None) -> domain.TpuSlice | None:
    """The Vertex AI TPU slice of a machine spec: v2/v3 by accelerator type and count (a board or a Pod), v5e by
    machine type and topology (ct5lp-hightpu-4t is 2x2 on one VM or 4x4 … 16x16 on several)."""
    for t in domain.TPU_SLICES.values():
        v = t.vertex
        if v is None:
            continue
        if v.accelerator_type:
            if v.accelerator_type == accelerator_type and v.accelerator_count == (accelerator_count or 8):
                return t
        elif v.machine_type == machine_type and (topology is None or v.topology == topology):
            return t
    return None


def vertex_replica_hourly(prices: Prices, machine_type: str, accelerator_type: str | None, accelerator_count: int,
                          region: str, spot: bool, topology: str | None = None) -> Hourly:
    """USD per hour of one Vertex AI replica (host + accelerators) from the catalogue; DomainError naming what is
    missing. The snapshot is never used here: it holds Compute Engine prices, not Vertex AI training prices."""
    what = machine_type + (f" + {accelerator_count} × {accelerator_type}" if accelerator_type else "")
    if prices.catalogue is None:
        unusable = any(n.startswith(_UNUSABLE) for n in prices.notes)
        raise DomainError(f"no Vertex AI training price for {what} in {region}: the Cloud Billing catalogue is "
                          f"{'cached in a file that is not usable' if unusable else 'not cached'} (the shipped snapshot "
                          f"has Compute Engine TPU VM prices, not Vertex AI's); run `{domain.REFRESH_COMMAND}`")
    skus = prices.catalogue.skus
    tpu = _vertex_tpu(machine_type, accelerator_type, accelerator_count, topology)
    if tpu is not None:
        unit = domain.tpu_unit_chips(tpu.generation)
        comps = [_component(skus, domain.vertex_tpu_want(tpu.generation), region, spot, tpu.chips / unit,
                            f"{tpu.chips} chips of TPU {tpu.generation}")]
    else:
        core, ram, cpus, gib = domain.vertex_host_wants(machine_type)
        comps = [_component(skus, core, region, spot, cpus, f"{cpus} vCPU"),
                 _component(skus, ram, region, spot, gib, f"{gib:g} GiB RAM")]
        if accelerator_type:
            comps.append(_component(skus, domain.vertex_gpu_want(accelerator_type), region, spot,
                                    accelerator_count, f"{accelerator_count} × {accelerator_type}"))
    return Hourly(tuple(comps), prices.catalogue.label)


def tpu_vm_hourly(prices: Prices, accelerator: domain.TpuSlice, region: str, spot: bool) -> Hourly:
    """USD per hour of a TPU VM slice: chips × the per-chip price (catalogue, else the shipped snapshot)."""
    version, chips = accelerator.generation, accelerator.chips
    label = f"{chips} chips of TPU {version}"
    note = ""
    if prices.catalogue is not None:
        try:
            unit = domain.tpu_unit_chips(version)
            comp = _component(prices.catalogue.skus, domain.tpu_vm_want(version), region, spot, chips / unit, label)
            return Hourly((comp,), prices.catalogue.label)
        except DomainError as exc:
            note = f"{exc}: the shipped snapshot's price is used"
    snap = prices.snapshot
    comp = Component(label, chips, snap.chip_hour(version, region, spot), "chip-hour",
                     f"per-chip {'SpotPrice' if spot else 'Price'} of the snapshot's TPU {version} rows in {region}")
    if spot:
        note = f"{note}; {domain.SPOT_VOLATILE}" if note else domain.SPOT_VOLATILE
    return Hourly((comp,), snap.label, note)
