"""The catalogue of Google Cloud facts, split by concern; this package re-exports every fact.

Pure Python on purpose: no pulumi, no google-cloud client, no TensorFlow, nothing of tpuctl above
the ground layer. Every function returns a value or raises ``DomainError`` with a one-line message
that says what to fix. Import ``from tpuctl.ground import domain`` and ask ``domain.<fact>``; code
that needs one concern only may import its module (``tpuctl.ground.domain.hub``).
"""

from tpuctl.ground.domain.accelerators import *  # noqa: F403
from tpuctl.ground.domain.apis import *  # noqa: F403
from tpuctl.ground.domain.hub import *  # noqa: F403
from tpuctl.ground.domain.names import *  # noqa: F403
from tpuctl.ground.domain.prediction import *  # noqa: F403
from tpuctl.ground.domain.prices import *  # noqa: F403
from tpuctl.ground.domain.principals import *  # noqa: F403
from tpuctl.ground.domain.storage_iam import *  # noqa: F403
from tpuctl.ground.domain.tpuvm import *  # noqa: F403
from tpuctl.ground.errors import DomainError  # noqa: F401
