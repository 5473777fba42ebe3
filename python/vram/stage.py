# SPDX-License-Identifier: Apache-2.0
"""A stage as an object: the stage calls of :class:`vram.Client` for one
stage id, as methods (``c.stage(0).sleep()``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

from ._args import checked, u32
from .types import StageInfo

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client


@checked
class Stage:
    """A stage this client registered (:meth:`vram.Client.stage`).  It
    holds nothing of its own: each method is the client's call for its id,
    with that call's errors (ENOENT once the stage is released)."""

    def __init__(self, client: "Client", stage: u32) -> None:
        self._client = client
        self._id = stage

    @property
    def id(self) -> int:
        return self._id

    @property
    def client(self) -> "Client":
        return self._client

    def info(self) -> StageInfo:
        """:meth:`vram.Client.stage_info`."""
        return self._client.stage_info(self._id)

    def regions(self) -> List[int]:
        """:meth:`vram.Client.stage_regions`."""
        return self._client.stage_regions(self._id)

    def sleep(self, discard_kv: bool = False, discard_experts: bool = False) -> None:
        """:meth:`vram.Client.stage_sleep`: the stage's GPU memory goes back
        to vramd, its bytes (those kept) into host memory of this process,
        its addresses stay reserved."""
        self._client.stage_sleep(self._id, discard_kv=discard_kv,
                                 discard_experts=discard_experts)

    def wake(self, keep_host: bool = False) -> None:
        """:meth:`vram.Client.stage_wake`: the memory again, at the same
        addresses, the kept bytes copied back."""
        self._client.stage_wake(self._id, keep_host=keep_host)

    @property
    def asleep(self) -> bool:
        """:meth:`vram.Client.stage_asleep`."""
        return self._client.stage_asleep(self._id)

    def release(self) -> None:
        """:meth:`vram.Client.stage_release`."""
        self._client.stage_release(self._id)

    def __repr__(self) -> str:
        return f"<vram.Stage {self._id} of client {self._client.id}>"
