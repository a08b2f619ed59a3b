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


def encrypt_kernel_channels() -> bool:
    """Make every kernel this process starts from now on use CurveZMQ; whether it could.

    ``book/execute_chapters.py`` calls it too. Plain ``jupyter nbconvert --execute`` gets the
    same with ``--KernelManager.transport_encryption=auto`` (the README says so).
    """
    import zmq
    from jupyter_client.manager import KernelManager

    trait = KernelManager.class_traits().get("transport_encryption")
    if trait is None or not zmq.has("curve"):
        return False
    trait.default_value = "auto"
    return True


def setup(app: Any) -> dict[str, Any]:
    encrypt_kernel_channels()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
