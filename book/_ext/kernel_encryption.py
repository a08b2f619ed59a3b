"""Sphinx extension of this book: the kernels that execute its chapters use an encrypted channel.

jupyter-book executes every chapter through nbclient, which starts an ipykernel listening
on localhost TCP. ipykernel 7 warns that this channel is unencrypted (once per chapter), and
it is right. jupyter_client provisions CurveZMQ keys for kernels whose kernelspec declares
support (ipykernel's does) when ``KernelManager.transport_encryption`` is ``"auto"``, but
jupyter-book has no place for kernel-manager settings, so this sets that trait's default
before the first chapter runs. Where pyzmq lacks CurveZMQ, or jupyter_client predates the
setting, it changes nothing and the build behaves as before.
"""

from __future__ import annotations

from typing import Any


def setup(app: Any) -> dict[str, Any]:
    import zmq
    from jupyter_client.manager import KernelManager

    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is not None and zmq.has("curve"):
        trait.default_value = "auto"
    return {"parallel_read_safe": True, "parallel_write_safe": True}
