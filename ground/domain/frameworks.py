"""Frameworks: which of TensorFlow and JAX Google supports for training, per accelerator and target, by which page;
the ``auto`` backend rule; which trainer image a run uses.

Targets, as ``--target`` spells them: ``local`` (this machine), ``vertex`` (Vertex AI custom training, which Google now
documents as Gemini Enterprise Agent Platform serverless training), ``tpu-vm`` (TPU VMs through the Cloud TPU API's
queued resources). An accelerator is asked for by its kind (``cpu``, ``gpu``, ``tpu``) and, for a TPU, its generation
(``v2`` … ``v6e``; TPU7x is refused on every target by ``tpu.refused_tpu``).

The rule (``default_backend``, what ``--backend auto`` means): the backend Google documents there, TensorFlow wherever
Google supports it (so every run that trained before JAX came keeps TensorFlow), else JAX (TPU v6e on Vertex AI).
A backend Google does not support there is refused in one line naming Google's page (``check_backend``).

Every answer carries its source (``Source``: the page and the day it was read with the search tool); the pages are
``SOURCES`` below, with the words each fact rests on. Where no page settles a fact it is marked ``[unverified: id]``
and listed in ``UNVERIFIED_FRAMEWORK_FACTS`` (named in docs/frameworks-on-tpus.md).

Images (``image_variant``): one trainer image per accelerator kind and backend, built from container/Dockerfile and
requirements/image-<variant>.lock. The TensorFlow images are the ones tpuctl always had; a JAX image carries
TensorFlow's CPU build (tf.data and the SavedModel export; CPU so that JAX alone owns the accelerator: "Ensure TF does
not see GPU and grab all GPU memory", JAX's own data-loading tutorial, and jax-ml/jax#13260, shared/REFERENCE.md
"Learned turn 5") beside JAX and Keras 3; on TPUs ``jax[tpu]`` with the libtpu it pins (``JAX_TPU_REQUIREMENTS``), the
route JAX's installation page gives for Cloud TPU VMs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground.errors import DomainError

FRAMEWORKS: tuple[str, ...] = ("tensorflow", "jax")
TARGETS: tuple[str, ...] = ("local", "vertex", "tpu-vm")
KINDS: tuple[str, ...] = ("cpu", "gpu", "tpu")
#: The TPU generations tpuctl knows (``tpu.TPU_SLICES``); TPU7x is refused before this module is asked.
TPU_GENERATIONS: tuple[str, ...] = ("v2", "v3", "v4", "v5e", "v5p", "v6e")

_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "local": "this machine", "vertex": "Vertex AI",
          "tpu-vm": "TPU VMs (Cloud TPU API)"}


@dataclass(frozen=True)
class Source:
    """A page a fact comes from, the day it was read, and the words the fact rests on."""
    url: str
    read: str            # ISO date the page was read
    says: str            # Google's (or the framework's) own words, shortened with …

    def __str__(self) -> str:
        return f"{self.url}, read {self.read}"


_VERTEX_TPU = ("https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/"
               "training-with-tpu-vm.md.txt")
_RUNTIMES = "https://docs.cloud.google.com/tpu/docs/runtimes.md.txt"

#: The pages every answer below rests on (read 2026-12-07 with the search tool unless said otherwise).
SOURCES: dict[str, Source] = {
    # Vertex AI's TPU training page: which TPUs it trains on and which frameworks each supports.
    "vertex-tpu": Source(_VERTEX_TPU, "2026-12-07",
                         "When configuring compute resources, you can specify TPU v2, TPU v3, or TPU v5e VMs. TPU v5e "
                         "supports JAX 0.4.6+, TensorFlow 2.15+, and PyTorch 2.1+. TPU v6e supports Python 3.10+, JAX "
                         "0.4.37+, and PyTorch 2.1+ using PJRT as the default runtime."),
    "vertex-tpu-tensorflow": Source(_VERTEX_TPU, "2026-12-07",
                                    "Starting with TPU v6e, TensorFlow isn't supported for training on Agent Platform. "
                                    "To use TensorFlow on TPU v6e VMs directly, see Cloud TPU runtimes. … TensorFlow "
                                    "training: Prebuilt container … Custom container … tensorflow and libtpu specially "
                                    "built for TPU VMs"),
    # Vertex AI runs any framework the user's own container holds (GPUs and CPUs: no framework list to consult).
    "vertex-custom-container": Source(
        "https://docs.cloud.google.com/gemini-enterprise-agent-platform/machine-learning/training/"
        "containers-overview.md.txt", "2026-12-07",
        "By running your machine learning (ML) training job in a custom container, you can use ML frameworks, non-ML "
        "dependencies, libraries, and binaries that are not otherwise supported on Agent Platform."),
    # Cloud TPU's software versions: the base versions JAX (and PyTorch) install onto, per generation.
    "tpu-runtimes-jax": Source(_RUNTIMES, "2026-12-07",
                               "Use the following common TPU software versions for PyTorch and JAX, then install the "
                               "framework you want to use. Trillium (v6e) v2-alpha-tpuv6e; v5p v2-alpha-tpuv5; v5e "
                               "v2-alpha-tpuv5-lite; v4 and older tpu-ubuntu2204-base"),
    # The TensorFlow section of the same page, read in its stored translations (cloud.google.com/tpu/docs/
    # supported-versions?hl=ko and /runtimes?hl=ja, 2026-12-07): the stored English copy ends before the section.
    "tpu-runtimes-tensorflow": Source(_RUNTIMES, "2026-12-07",
                                      "tpu-vm-tf-x.y.z[-{pod}][-{device_api}] … TPU v6e, v5e and v5p support TensorFlow "
                                      "2.15.0 and later: tpu-vm-tf-x.y.z-{pod}-pjrt … TPU v4 with TensorFlow 2.10.1 or "
                                      "later: follow TPU v2 and v3 … tpu-vm-tf-x.y.z (tpu-vm-tf-x.y.z-pod on a "
                                      "multi-host TPU) … TensorFlow 2.18.0: libtpu.so 1.12.0 (the table's newest row)"),
    # The v6e training guide (Cloud TPU API): JAX and PyTorch only.
    "tpu-v6e-training": Source("https://docs.cloud.google.com/tpu/docs/v6e-training.md.txt", "2026-12-07",
                               "training models on Cloud TPU v6e (also called Trillium), covering environment setup, "
                               "performance optimization, and practical training examples using JAX and PyTorch"),
    # JAX's installation page: the platforms and the one-line installs.
    "jax-install": Source("https://docs.jax.dev/en/latest/installation.html", "2026-12-07",
                          "CPU-only (Linux/macOS/Windows) pip install -U jax … TPU (Google Cloud TPU VM) pip install -U "
                          "\"jax[tpu]\" … Supported platforms, Linux x86_64: CPU yes, NVIDIA GPU yes, Google Cloud TPU "
                          "yes"),
    # jax 0.10.2's own metadata on the package index: the libtpu its tpu extra pins.
    "jax-tpu-pin": Source("https://pypi.org/project/jax/0.10.2/", "2026-12-07",
                          "Requires-Dist: libtpu==0.0.42.*; extra == \"tpu\" (jax 0.10.2 is the newest jax for Python "
                          "3.11: shared/REFERENCE.md, Learned turn 5)"),
    # TensorFlow's install page: the CUDA build on Linux, the CPU-only build.
    "tensorflow-install": Source("https://www.tensorflow.org/install/pip.md.txt", "2026-12-07",
                                 "For the CPU-only build, use the pip package named tensorflow-cpu. … Linux: python3 -m "
                                 "pip install 'tensorflow[and-cuda]'"),
}

#: What jax's tpu extra installs (``SOURCES["jax-tpu-pin"]``): the jax-tpu image's lock must hold exactly these.
JAX_TPU_REQUIREMENTS: dict[str, str] = {"jax": "0.10.2", "libtpu": "0.0.42.*"}

#: Facts of this module that no page read here confirmed (``[unverified: id]`` where used; docs/frameworks-on-tpus.md).
UNVERIFIED_FRAMEWORK_FACTS: dict[str, str] = {
    "jax-libtpu-v2-v3": "libtpu 0.0.42 (what jax[tpu] 0.10.2 pins) still drives TPU v2 and v3: Google lists JAX on "
                        "'v4 and older' (tpu-ubuntu2204-base) but no page names the libtpu releases for v2/v3",
    "vertex-jax-v2-v3": "Vertex AI trains JAX on TPU v2/v3 in a custom container: its TPU page offers v2/v3 VMs but "
                        "names framework versions for v5e and v6e only",
}


@dataclass(frozen=True)
class Support:
    """Whether Google supports training one framework on one accelerator and target, and where it says so."""
    framework: str                       # tensorflow | jax
    supported: bool
    reason: str                          # one line, in Google's terms
    source: Source
    #: TPU VMs: the TPU software version Google documents for this framework (one host, and a multi-host slice)
    runtime_version: str | None = None
    multi_host_runtime_version: str | None = None
    #: how Google (or the framework) says to install it there
    route: str | None = None
    #: an UNVERIFIED_FRAMEWORK_FACTS id when no page settles the answer (the answer is then tpuctl's reading)
    unverified_id: str | None = None

    @property
    def cited(self) -> str:
        """The source as one line: URL, read DATE."""
        return str(self.source)


#: The base TPU software version for JAX, per generation (``SOURCES["tpu-runtimes-jax"]``).
_JAX_BASE = {"v6e": "v2-alpha-tpuv6e", "v5p": "v2-alpha-tpuv5", "v5e": "v2-alpha-tpuv5-lite",
             "v4": "tpu-ubuntu2204-base", "v3": "tpu-ubuntu2204-base", "v2": "tpu-ubuntu2204-base"}
#: The newest TensorFlow of Google's TPU table and its libtpu.so (``SOURCES["tpu-runtimes-tensorflow"]``).
TF_TPU_NEWEST = "2.18.0"
TF_TPU_LIBTPU_SO = "1.12.0"
#: Generations whose TensorFlow runtimes are the PJRT ones (``-pjrt``; ``SOURCES["tpu-runtimes-tensorflow"]``).
_TF_PJRT = frozenset({"v5e", "v5p", "v6e"})


def _tpu_vm(generation: str) -> dict[str, Support]:
    """TPU VMs through the Cloud TPU API: Google's TensorFlow runtimes and JAX's base versions."""
    pjrt = "-pjrt" if generation in _TF_PJRT else ""
    tf_reason = (f"TPU {generation} runs TensorFlow 2.15.0 and later on Google's -pjrt TensorFlow runtimes"
                 if pjrt else f"TPU {generation} runs TensorFlow on Google's tpu-vm-tf-x.y.z runtimes")
    tensorflow = Support(
        "tensorflow", True, f"{tf_reason} (newest: TensorFlow {TF_TPU_NEWEST} with libtpu.so {TF_TPU_LIBTPU_SO})",
        SOURCES["tpu-runtimes-tensorflow"], runtime_version=f"tpu-vm-tf-{TF_TPU_NEWEST}{pjrt}",
        multi_host_runtime_version=f"tpu-vm-tf-{TF_TPU_NEWEST}-pod{pjrt}",
        route=f"Google's TensorFlow runtime: TensorFlow {TF_TPU_NEWEST} preinstalled on every host")
    base = _JAX_BASE[generation]
    old = generation in ("v2", "v3")
    jax = Support(
        "jax", True, f"JAX installs onto the base TPU software version {base}"
        + (" (the v6e training guide covers JAX and PyTorch only)" if generation == "v6e" else "")
        + (" [unverified: jax-libtpu-v2-v3]" if old else ""),
        SOURCES["tpu-v6e-training"] if generation == "v6e" else SOURCES["tpu-runtimes-jax"],
        runtime_version=base, multi_host_runtime_version=base,
        route=f"pip install \"jax[tpu]\" on {base} (jax {JAX_TPU_REQUIREMENTS['jax']} pins libtpu "
              f"{JAX_TPU_REQUIREMENTS['libtpu']}), in a container on the host",
        unverified_id="jax-libtpu-v2-v3" if old else None)
    return {"tensorflow": tensorflow, "jax": jax}


def _vertex_tpu(generation: str) -> dict[str, Support]:
    """Vertex AI custom training on TPUs: v2, v3 and v5e VMs, and v6e for JAX (its TPU page)."""
    offered = SOURCES["vertex-tpu"]
    if generation in ("v4", "v5p"):
        reason = f"Vertex AI custom training does not offer TPU {generation} (its TPU page names v2, v3, v5e and v6e)"
        return {f: Support(f, False, reason, offered) for f in FRAMEWORKS}
    if generation == "v6e":
        return {"tensorflow": Support("tensorflow", False, "Starting with TPU v6e, TensorFlow isn't supported for "
                                      "training on Vertex AI (Agent Platform)", SOURCES["vertex-tpu-tensorflow"]),
                "jax": Support("jax", True, "TPU v6e supports JAX 0.4.37+ on Vertex AI (PJRT)", offered,
                               route="a custom container with jax[tpu]")}
    if generation == "v5e":
        return {"tensorflow": Support("tensorflow", True, "TPU v5e supports TensorFlow 2.15+ on Vertex AI (PJRT); no "
                                      "prebuilt container for v5e", offered,
                                      route="a custom container with TensorFlow and libtpu, /lib/libtpu.so"),
                "jax": Support("jax", True, "TPU v5e supports JAX 0.4.6+ on Vertex AI", offered,
                               route="a custom container with jax[tpu]")}
    return {"tensorflow": Support("tensorflow", True, f"Vertex AI trains TensorFlow on TPU {generation} VMs (prebuilt "
                                  "or custom container with Cloud TPU's tensorflow and libtpu)",
                                  SOURCES["vertex-tpu-tensorflow"],
                                  route="a custom container with TensorFlow and libtpu, /lib/libtpu.so"),
            "jax": Support("jax", True, f"Vertex AI offers TPU {generation} VMs and runs the frameworks a custom "
                           "container holds; its TPU page names JAX versions for v5e and v6e only "
                           "[unverified: vertex-jax-v2-v3]", offered, route="a custom container with jax[tpu]",
                           unverified_id="vertex-jax-v2-v3")}


def _gpu_cpu(kind: str, target: str) -> dict[str, Support]:
    """GPUs and CPUs: both frameworks everywhere, by the frameworks' own install pages; on Vertex AI in the custom
    container tpuctl builds."""
    what = "NVIDIA GPUs" if kind == "gpu" else "CPUs"
    tf_route = "tensorflow[and-cuda]" if kind == "gpu" else "tensorflow-cpu"
    jax_route = "jax[cuda12]" if kind == "gpu" else "jax"
    if target == "vertex":
        container = SOURCES["vertex-custom-container"]
        return {f: Support(f, True, f"Vertex AI runs the ML framework a custom container holds; {_NAMES[f]} runs on "
                           f"{what}", container, route=f"a custom container with {r}")
                for f, r in (("tensorflow", tf_route), ("jax", jax_route))}
    return {"tensorflow": Support("tensorflow", True, f"TensorFlow runs on {what} on Linux x86_64",
                                  SOURCES["tensorflow-install"], route=f"pip install {tf_route}"),
            "jax": Support("jax", True, f"JAX runs on {what} on Linux x86_64", SOURCES["jax-install"],
                           route=f"pip install {jax_route}")}


def _check(kind: str, generation: str | None, target: str) -> str | None:
    """The TPU generation (None for a GPU or CPU) once kind, generation and target are known."""
    if target not in TARGETS:
        raise DomainError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    if kind not in KINDS:
        raise DomainError(f"unknown accelerator kind {kind!r}: one of {', '.join(KINDS)}")
    if kind != "tpu":
        if target == "tpu-vm":
            raise DomainError(f"a {kind.upper()} run cannot target tpu-vm: TPU VMs carry TPUs (use --target local "
                              "or vertex)")
        return None
    gen = (generation or "").strip().lower()
    if gen not in TPU_GENERATIONS:
        from ground.domain.tpu import refused_tpu  # the TPU catalogue, loaded only for this refusal

        refused = refused_tpu(gen) if gen else None
        raise DomainError(refused or f"unknown TPU generation {generation!r}: one of {', '.join(TPU_GENERATIONS)}")
    return gen


def backend_support(kind: str, generation: str | None, target: str) -> dict[str, Support]:
    """Whether Google supports TensorFlow and JAX for training on this accelerator and target: ``{"tensorflow":
    Support, "jax": Support}``. ``kind`` cpu|gpu|tpu; ``generation`` a TPU's (``v6e``), ignored for a GPU or CPU (every
    GPU tpuctl offers runs both); ``target`` local|vertex|tpu-vm. A local run on a TPU is a run on a TPU VM host: the
    TPU VM answer. Bad input is a DomainError naming what is known."""
    gen = _check(kind, generation, target)
    if gen is None:
        return _gpu_cpu(kind, target)
    return _vertex_tpu(gen) if target == "vertex" else _tpu_vm(gen)


def _where(kind: str, generation: str | None, target: str) -> str:
    what = f"TPU {generation}" if kind == "tpu" else ("GPUs" if kind == "gpu" else "CPUs")
    return f"{what} on {_NAMES[target]}"


def default_backend(kind: str, generation: str | None, target: str) -> str:
    """The ``auto`` backend: TensorFlow wherever Google supports it, else JAX; a DomainError naming Google's page when
    Google supports neither there (TPU v4 on Vertex AI)."""
    support = backend_support(kind, generation, target)
    for framework in FRAMEWORKS:
        if support[framework].supported:
            return framework
    first = support[FRAMEWORKS[0]]
    raise DomainError(f"no framework trains on {_where(kind, generation, target)}: {first.reason} ({first.cited})")


def check_backend(kind: str, generation: str | None, target: str, backend: str) -> None:
    """None when Google supports ``backend`` there; else a DomainError in one line naming Google's page and what
    does train there."""
    if backend not in FRAMEWORKS:
        raise DomainError(f"unknown backend {backend!r}: one of {', '.join(FRAMEWORKS)} (or auto)")
    support = backend_support(kind, generation, target)
    answer = support[backend]
    if answer.supported:
        return
    others = [f for f in FRAMEWORKS if f != backend and support[f].supported]
    hint = f"; the {others[0]} backend trains there" if others else ""
    raise DomainError(f"{_NAMES[backend]} does not train on {_where(kind, generation, target)}: {answer.reason} "
                      f"({answer.cited}){hint}")


@dataclass(frozen=True)
class ImageVariant:
    """One trainer image: what it is built for and what it holds (requirements/image-<name>.in)."""
    name: str
    kind: str                 # cpu | gpu | tpu
    backend: str              # tensorflow | jax
    holds: str                # one line for docs and help


#: Every trainer image variant, by name (``tpuctl image build --variant``).
IMAGE_VARIANTS: dict[str, ImageVariant] = {
    v.name: v
    for v in (
        ImageVariant("cpu", "cpu", "tensorflow", "tensorflow-cpu + tf_keras"),
        ImageVariant("gpu", "gpu", "tensorflow", "TensorFlow's CUDA wheels (tensorflow[and-cuda]) + tf_keras"),
        ImageVariant("tpu", "tpu", "tensorflow", "tensorflow-tpu + libtpu"),
        ImageVariant("jax-cpu", "cpu", "jax", "JAX + Keras 3, tensorflow-cpu for tf.data and the SavedModel export"),
        ImageVariant("jax-gpu", "gpu", "jax", "jax[cuda12] + Keras 3, tensorflow-cpu for tf.data and the export"),
        ImageVariant("jax-tpu", "tpu", "jax", "jax[tpu] with the libtpu it pins + Keras 3, tensorflow-cpu"),
    )
}


def image_variant(kind: str, backend: str) -> str:
    """The trainer image variant a run on ``kind`` (cpu|gpu|tpu) with ``backend`` (tensorflow|jax) uses."""
    for variant in IMAGE_VARIANTS.values():
        if variant.kind == kind and variant.backend == backend:
            return variant.name
    if backend not in FRAMEWORKS:
        raise DomainError(f"unknown backend {backend!r}: one of {', '.join(FRAMEWORKS)}")
    raise DomainError(f"unknown accelerator kind {kind!r}: one of {', '.join(KINDS)}")
