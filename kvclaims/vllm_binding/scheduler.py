"""The binding's scheduler: one mixin over vLLM's `Scheduler` and `AsyncScheduler`.

Selected with `--scheduler-cls kvclaims.vllm_binding.ClaimScheduler` (or
`scheduler_cls=` offline). vLLM instantiates that class; when the engine runs with async
scheduling it becomes `ClaimAsyncScheduler` instead (a plain `Scheduler` subclass under
async scheduling would run the wrong output bookkeeping), so one flag covers both.

The mixin only adds hooks around vLLM's own entry points and calls them unchanged; all claim
logic lives in `ClaimArbiter`. Hook order per engine step:
    add_request   -> super, then claim operations of the new request
    schedule      -> expiry + feasibility (refuse / defer / demote), super, admissions
    update_from_output -> claim outcomes of failed / completed loads, super, then loss checks,
                          materialization, refusal outputs
    _free_request -> feeders pin their claim blocks while still reachable, then super
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from kvclaims.spec.trace import CloseReason
from kvclaims.vllm_binding.arbiter import ClaimArbiter
from kvclaims.vllm_binding.config import BindingConfig
from kvclaims.vllm_binding.plugin import require_supported_vllm
from kvclaims.vllm_binding.shutdown import engine_stopping


class ClaimSchedulerMixin:
    """Resident claims inside a vLLM scheduler; `self.kvclaims` is the claim arbiter."""

    kvclaims: ClaimArbiter

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_supported_vllm()
        super().__init__(*args, **kwargs)
        vllm_config = self.vllm_config  # type: ignore[attr-defined]
        self.kvclaims = ClaimArbiter(
            self, BindingConfig.from_additional_config(vllm_config.additional_config)
        )

    # Each hook brackets vLLM's method with enter()/leave() (plain calls, not a context
    # manager: these run every engine step) so trace lines are written only on the way out.

    def add_request(self, request: Request) -> None:
        arbiter = self.kvclaims
        is_new = request.request_id not in self.requests  # type: ignore[attr-defined]
        arbiter.enter()
        try:
            super().add_request(request)  # type: ignore[misc]
            if is_new:
                arbiter.on_request_added(request)
        finally:
            arbiter.leave()

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        arbiter = self.kvclaims
        arbiter.enter()
        try:
            held, order = arbiter.before_schedule()
            try:
                output: SchedulerOutput = super().schedule(*args, **kwargs)  # type: ignore[misc]
            finally:
                arbiter.restore_held(held, order)
            arbiter.after_schedule(output)
            return output
        finally:
            arbiter.leave()

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        arbiter = self.kvclaims
        connector_output = model_runner_output.kv_connector_output
        if connector_output is not None and (
            connector_output.invalid_block_ids or connector_output.failed_recving
        ):
            # vLLM's invalid-KV-load path may evict hashes even from pinned blocks.
            arbiter.mark_pins_suspect()
        arbiter.enter()
        try:
            # Failed and completed loads become claim outcomes before vLLM handles them.
            arbiter.before_update(connector_output)
            outputs: dict[int, EngineCoreOutputs] = super().update_from_output(  # type: ignore[misc]
                scheduler_output, model_runner_output
            )
            arbiter.after_update(outputs)
            return outputs
        finally:
            arbiter.leave()

    def finish_requests(self, request_ids: Any, finished_status: RequestStatus) -> list[Request]:
        arbiter = self.kvclaims
        arbiter.enter()
        try:
            return super().finish_requests(request_ids, finished_status)  # type: ignore[misc]
        finally:
            arbiter.leave()

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        self.kvclaims.on_request_finishing(request)
        return super()._free_request(request, delay_free_blocks)  # type: ignore[misc]

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        with self.kvclaims.entry():
            self.kvclaims.before_reset(reset_running_requests)
            reset: bool = super().reset_prefix_cache(  # type: ignore[misc]
                reset_running_requests=reset_running_requests, reset_connector=reset_connector
            )
            self.kvclaims.check_blocks(pinned=True)
            return reset

    def kvclaims_restart(self, config: BindingConfig) -> None:
        """Start a fresh claim arbiter (lanes that run many scenarios on one engine; call only
        while the engine is idle). The old arbiter releases its pins and host-copy holds
        without reporting anything and closes its trace; vLLM's prefix caches, device and CPU
        tier, are reset between the two, so no scenario sees another's blocks."""
        self.kvclaims.release_everything()
        self.kvclaims.close()
        super().reset_prefix_cache(reset_connector=self.connector is not None)  # type: ignore[misc]
        self.kvclaims = ClaimArbiter(self, config)

    def has_requests(self) -> bool:
        # After a termination signal vLLM's engine core asks this to decide whether to stop
        # (`EngineCore._handle_shutdown`); once nothing is left the trace ends at once, not
        # after vLLM's teardown, which may be killed at the server's shutdown timeout.
        busy: bool = super().has_requests()  # type: ignore[misc]
        if not busy and engine_stopping():
            self.kvclaims.stop_when_idle()
        return busy

    def shutdown(self) -> None:
        try:
            super().shutdown()  # type: ignore[misc]
        finally:
            with self.kvclaims.entry():  # not re-entered by the signal handler's early close
                self.kvclaims.close(CloseReason.engine_shutdown)


class ClaimScheduler(ClaimSchedulerMixin, Scheduler):
    """vLLM's `Scheduler` with resident claims; the value for `--scheduler-cls`.

    Instantiated under async scheduling it returns a `ClaimAsyncScheduler`.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ClaimScheduler:
        if cls is ClaimScheduler and _async_scheduling(args, kwargs):
            return super().__new__(ClaimAsyncScheduler)
        return super().__new__(cls)


class ClaimAsyncScheduler(ClaimScheduler, AsyncScheduler):
    """vLLM's `AsyncScheduler` with resident claims (the same mixin)."""


def _async_scheduling(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    vllm_config = kwargs.get("vllm_config", args[0] if args else None)
    return bool(getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False))
