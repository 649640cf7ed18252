"""Waiting for the other tasks of a cluster, never forever: probe each peer's port until it answers or the
deadline passes, answering on this task's own port meanwhile. Runs before the blocking TensorFlow call that
needs the peers, so a peer that never starts is one line naming it (no TensorFlow here).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence

from trainer.cluster import ClusterConfig, parse_address
from trainer.errors import HardwareError


class AddressProbe:
    """Probe ``(label, "host:port")`` addresses until each accepts a TCP connection or the deadline passes.

    Runs before the (blocking, uninterruptible) TensorFlow call that needs the peers, so the error can
    name what never answered. ``refused_is_final``: a refused connection (nothing listens there) or a host
    name that does not resolve is an answer, rather than a peer that has not started yet.
    """

    def __init__(self, addresses: Sequence[tuple[str, str]], deadline: float, *, refused_is_final: bool = False,
                 poll_seconds: float = 0.2):
        self.pending = dict(addresses)  # label -> address
        self.refused: dict[str, str] = {}
        self.unresolved: dict[str, str] = {}
        self.deadline, self.refused_is_final, self.poll_seconds = deadline, refused_is_final, poll_seconds

    def missing(self) -> dict[str, str]:
        return dict(self.pending)

    def run(self) -> None:
        while True:
            for label, address in self.missing().items():
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    return
                host, port = parse_address(address) or (address, 0)
                try:
                    with socket.create_connection((host, port), timeout=min(1.0, remaining)):
                        pass
                except ConnectionRefusedError:
                    if self.refused_is_final:
                        self.refused[label] = self.pending.pop(label)
                except socket.gaierror:  # the name does not resolve: with refused_is_final, as final as a refusal
                    if self.refused_is_final:
                        self.unresolved[label] = self.pending.pop(label)
                except OSError:  # timeout, unreachable, unknown host: not up (yet)
                    continue
                else:
                    self.pending.pop(label)
            if not self.pending or time.monotonic() >= self.deadline:
                return
            time.sleep(self.poll_seconds)


def await_tasks(tasks: Sequence[tuple[str, int, str]], timeout: float) -> None:
    """Return once every ``(job, index, address)`` task answers on its port; HardwareError naming the ones
    that did not within ``timeout`` seconds."""
    probe = AddressProbe([(f"{job} {index}", address) for job, index, address in tasks], time.monotonic() + timeout)
    probe.run()
    missing = ", ".join(f"{label} at {address}" for label, address in probe.missing().items())
    if missing:
        raise HardwareError(f"TF_CONFIG cluster did not form within {timeout:g} s: no answer from "
                            f"{missing}; start every task of the cluster (same TF_CONFIG), "
                            "or raise --cluster_timeout_seconds")


class Rendezvous:
    """Answer TCP connections on this task's own TF_CONFIG port while the peers are probed.

    TensorFlow opens that port only inside MultiWorkerMirroredStrategy(), which then blocks in C++
    (holding the GIL, ignoring SIGTERM) until every task has registered; with a peer that never starts
    it waits forever. So every task first listens on its own port and probes the others': when all
    answer, each closes its listener and creates the strategy (a peer probing in that instant sees a
    refused connection and simply retries until TensorFlow's server is up on the same port).
    """

    def __init__(self, address: str):
        _, port = parse_address(address) or ("", 0)
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        try:
            self._sock = socket.create_server(("", port), family=family, dualstack_ipv6=family == socket.AF_INET6)
        except OSError as err:
            raise HardwareError(f"TF_CONFIG: this task's port {port} ({address}) cannot be opened on this machine "
                                f"({err.strerror or err}); is another process using it?") from None
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tpuctl-rendezvous", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:  # timeout: check the stop flag again
                continue
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def wait_for_peers(cluster: ClusterConfig, timeout: float) -> None:
    """Return once every other chief/worker task answers on its port (:func:`await_tasks`), answering
    on this task's own port meanwhile."""
    peers = cluster.peers()
    if not peers:
        return
    rendezvous = Rendezvous(cluster.address)
    try:
        await_tasks(peers, timeout)
    finally:
        rendezvous.close()
