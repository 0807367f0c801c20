"""Peers: other libraries' attention, checked against the same FP64 reference and timed the same
way as pa-bench's kernels. The built-in torch peers use this interface; so can anyone's.

A peer is a class with these members (subclass :class:`Peer` for the defaults)::

    class MyAttention(Peer):
        name = "my-attn"                       # its variant name in configs, --variant and tables
        summary = "one line for the tables"
        backends = ("cuda",)                   # where it runs: "cuda" (timed) and/or "numpy" (CPU)

        @classmethod
        def unavailable(cls, problem):         # why it cannot run here, or None (cheap: no GPU work)
            ...
        def __init__(self, inputs, device):    # prepare this shape's tensors once (outside timing)
            ...                                # on "cuda" (the cuda backend) or "cpu" (numpy);
                                               # raise CannotRun("why") if the shape does not suit
        def call(self):                        # a no-argument callable that enqueues ONE call's GPU
            ...                                # work on the current CUDA stream, and nothing else
        def output(self):                      # one fresh call's output: float32 [Hq, Nq, D] (NumPy)
            ...
        def impl(self):                        # optional: which kernel ran ("cudnn", "flash" ...)
            ...

and is registered with :func:`register_peer` from a plug-in module (``pa_bench.problem.plugins``). The
inputs (``pa_bench.problem.inputs.Inputs``) hold Q (fp16 ``[Hq, Nq, D]``), the int8 K/V
(``[Hkv, Nk, D]``) with fp32 per-token scales, and the problem (heads, causal offset
``context``, ``softmax_scale``): causal is bottom-right (query i sees keys j <= context + i),
GQA maps query head h to KV head h // (Hq / Hkv). pa-bench times ``call()``'s GPU work only, with
the host held out of the interval, and judges nothing: a peer's error against FP64 is reported
beside the kernels' for information (a peer has no numerics model).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import numpy as np

from pa_bench import variants as registry


class CannotRun(Exception):
    """A peer cannot run this shape; the text is the row's one-line reason."""


class Peer:
    """The defaults of the peer interface (see the module docstring)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    backends: ClassVar[tuple[str, ...]] = ("cuda",)
    #: True where constructing the peer compiles into an on-disk cache (torch.compile): a run
    #: then builds it ahead in a child process (pa_bench.backends.compile_ahead)
    compiles_ahead: ClassVar[bool] = False

    @classmethod
    def unavailable(cls, problem) -> str | None:
        return None

    def __init__(self, inputs, device: str = "cuda") -> None:
        self.inputs = inputs
        self.device = device

    def call(self) -> Callable[[], None]:
        raise NotImplementedError(f"{type(self).__name__}.call()")

    def output(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__}.output()")

    def impl(self) -> str | None:
        return None

    def describe(self) -> dict[str, Any]:
        """Anything worth keeping in meta.json about this shape's peer (its kernels ...)."""
        return {}


def register_peer(cls: type, *, after: str | None = None) -> type:
    """Add the peer class ``cls`` to the registry (at the end of the table order); returns it, so
    it can decorate the class."""
    name = getattr(cls, "name", "")
    if not name or not isinstance(name, str):
        raise ValueError(f"{cls!r}: a peer needs a name")
    for member in ("call", "output"):
        if not callable(getattr(cls, member, None)):
            raise ValueError(f"peer {name!r}: {cls.__name__} has no {member}()")
    registry.register(registry.Variant(name, registry.PEER, getattr(cls, "summary", "") or name,
                                       runner=cls))
    return cls


def peer_class(variant: str) -> type:
    """The class that runs peer ``variant`` (its registry entry's runner, imported if named)."""
    entry = registry.get(variant)
    if not entry.is_peer:
        raise ValueError(f"{variant!r} is not a peer")
    return entry.resolve_runner()


def runs_on(variant: str, backend: str) -> bool:
    """Whether peer ``variant`` runs on ``backend`` ("cuda" or "numpy")."""
    return backend in tuple(getattr(peer_class(variant), "backends", ("cuda",)))


__all__ = ["Peer", "CannotRun", "register_peer", "peer_class", "runs_on"]
