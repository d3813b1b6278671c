"""Bounded staleness: a sampler thread generating the next batches while the learner updates.

With ``rollout.staleness: k`` the batch trained at step ``t`` is sampled by the policy of version
``max(0, t - k)`` (version ``v`` = the weights after ``v`` updates; version 0 the initial policy). The
schedule is fixed by ``k``, never by timing:

    learner (main thread)                          sampler thread (its own copy of the weights)
    step t: ask for steps <= t + k (each with the   take requests in order; load the snapshot of the
            snapshot of its version; draw their     request's version; generate with the request's seed
            prompts here, in step order)             (seed of (run seed, step), as the synchronous loop)
            take step t's batch (wait if not ready)
            score, update -> version t + 1; snapshot it

So the request for step ``t + k`` (version ``t``) is generated while step ``t`` updates: the sampler
and the learner run at the same time, and their numbers do not depend on which finishes first.

Determinism: every request carries its own seed and weight snapshot, prompts are drawn on the main
thread in step order (the run's prompt RNG sees the same draws as the synchronous loop), and the global
torch RNG, which both samplers' ``generate`` seed (vLLM's in-process engine samples from it), is used under
one lock by both threads (an eval on the main thread waits for a sample in flight; ``LockedSampler``).

Engines: the sampler behind the thread is whatever ``sampler.backend`` builds, over a module of its own
(``weights``); a version is handed to it with ``sync_weights``, the synchronous loop's call. With vLLM
that is the in-place load and its probe check (two engines in one process: the main thread's for evals,
the thread's for batches; they take turns on the lock, syncs included). The learner may be torch or
DeepSpeed: its side only publishes snapshots of the (gathered) weights after each update. Torch's thread count is process-wide (OpenMP
here): while the pipeline runs it is set to half the run's threads (``split_threads``), which the
execution layer chose from the idle CPUs (``workbench/execution/threads.py``), so the two sides do not
oversubscribe the cores.

Resume: a checkpoint after step ``t`` holds the snapshots of the versions the steps after it still need
(``max(0, t + 1 - k) .. t``) and the prompt source's state before step ``t + 1``'s draws (``state()``: the
prompt RNG's state and the prompt order's pass in progress); the resumed run asks for those steps again and
gets the same batches.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from workbench.batch import Rollouts
from workbench.rollout.base import Sampler
from workbench.rollout.weights import plain_state_dict
from workbench.tasks import Problem


def behaviour_version(step: int, staleness: int) -> int:
    """The policy version that samples step ``step``'s batch: ``max(0, step - k)``."""
    return max(0, step - staleness)


def split_threads(total: int) -> int:
    """Torch threads per side while the sampler and learner run at once: half the run's, at least one
    (torch's count is process-wide; each Python thread's parallel region opens a team of that size)."""
    return max(1, total // 2)


def sampling_seed(run_seed: int, step: int) -> int:
    """The seed of step ``step``'s batch: the synchronous loop's first sampling round (``collect_batch``)."""
    return (run_seed * 1_000_003 + step) * 101


@dataclass(frozen=True)
class Request:
    step: int
    version: int
    problems: list[Problem]
    seed: int


@dataclass(frozen=True)
class Sampled:
    """One pipelined batch: the rollouts, the policy version that sampled them, the seconds it took."""

    step: int
    version: int
    rollouts: Rollouts
    sample_s: float


class LockedSampler:
    """A sampler whose ``generate`` holds the pipeline's RNG lock: the main thread's evals and the sampler
    thread's batches both seed the global torch RNG, so they take turns. With ``lock_sync`` its weight sync
    holds the lock too: a vLLM sync runs the engine (its probe), and two in-process vLLM engines must not run
    at once (vLLM's forward context is a module global). An HF sync only copies tensors, and waiting there
    for the sample in flight would stall the learner behind the sampler."""

    def __init__(self, sampler: Sampler, lock: threading.Lock, *, lock_sync: bool = False) -> None:
        self.sampler, self.lock, self.lock_sync = sampler, lock, lock_sync

    def generate(self, problems: list[Problem], group_size: int, *, temperature: float, seed: int) -> Rollouts:
        with self.lock:
            return self.sampler.generate(problems, group_size, temperature=temperature, seed=seed)

    def sync_weights(self, learner_model) -> None:
        if not self.lock_sync:
            self.sampler.sync_weights(learner_model)
            return
        with self.lock:
            self.sampler.sync_weights(learner_model)

    def close(self) -> None:
        self.sampler.close()


class StalePipeline:
    """The sampler thread and the queues between it and the learner. ``sampler`` (any ``Sampler``: HF or
    vLLM) was built over ``weights``, a module of its own (``plain_copy`` of the learner's), never the
    learner's: to sample with version ``v`` its thread loads ``v``'s snapshot into ``weights`` and hands
    them over with ``sampler.sync_weights(weights)``, the call the synchronous loop makes after each
    update (a vLLM engine loads them in place and verifies them against ``weights``)."""

    def __init__(
        self,
        sampler,
        weights: torch.nn.Module,
        *,
        staleness: int,
        steps: int,
        group_size: int,
        temperature: float,
        run_seed: int,
        lock: threading.Lock,
        threads: int,
    ) -> None:
        if staleness < 1:
            raise ValueError(f"a pipeline needs staleness >= 1, got {staleness}")
        self.sampler, self.weights, self.k, self.steps = sampler, weights, staleness, steps
        self.loaded: int | None = None  # the version ``weights`` and the sampler hold; the first request loads its own
        self.group_size, self.temperature, self.run_seed = group_size, temperature, run_seed
        self.lock, self.threads = lock, threads
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}  # version -> weights, while a step still needs it
        self.prompts_before: dict[int, Any] = {}  # step -> the prompt source's state before its draws
        self.next_request = 0
        self.requests: queue.Queue[Request | None] = queue.Queue()
        self.done: dict[int, Sampled] = {}
        self.ready = threading.Condition()
        self.error: BaseException | None = None
        self.sampler_wait_s = 0.0  # the sampler thread's idle time since the last take
        self.thread = threading.Thread(target=self._run, name="workbench-sampler", daemon=True)
        self.thread.start()

    # ---- the learner's side (main thread) ----
    def publish(self, version: int, model: torch.nn.Module) -> None:
        """A snapshot of ``model``'s weights as version ``version``, if a later step samples with it."""
        if version + self.k < self.steps or (version == 0 and self.steps > 0):
            self.snapshots[version] = {name: t.detach().clone() for name, t in plain_state_dict(model).items()}

    def ask(self, through: int, draw, prompt_state: Callable[[], Any]) -> None:
        """Request every step up to ``through`` not yet requested; ``draw(step)`` draws its prompts, and
        ``prompt_state()`` (recorded before each step's draws, for checkpoints) is all that decides what it draws."""
        for step in range(self.next_request, min(through, self.steps - 1) + 1):
            version = behaviour_version(step, self.k)
            self.prompts_before[step] = prompt_state()
            self.requests.put(Request(step, version, draw(step), sampling_seed(self.run_seed, step)))
            self.next_request = step + 1

    def take(self, step: int) -> tuple[Sampled, float, float]:
        """Step ``step``'s batch; with the learner's wait for it and the sampler's idle time since the last take."""
        start = time.perf_counter()
        with self.ready:
            while step not in self.done and self.error is None:
                self.ready.wait()
            if step not in self.done:  # the batches sampled before a failure are still trained on
                assert self.error is not None
                raise self.error
            sampled = self.done.pop(step)
            sampler_wait, self.sampler_wait_s = self.sampler_wait_s, 0.0
        learner_wait = time.perf_counter() - start
        needed = behaviour_version(step + 1, self.k)  # later steps sample with versions >= this
        for version in [v for v in self.snapshots if v < needed]:
            del self.snapshots[version]
        self.prompts_before.pop(step, None)
        return sampled, learner_wait, sampler_wait

    def state(self, steps_done: int, prompt_state: Callable[[], Any]) -> tuple[Any, dict[int, dict[str, torch.Tensor]]]:
        """What a checkpoint after ``steps_done`` steps needs: the prompt source's state before step ``steps_done``'s
        draws (as ``ask`` recorded it; ``prompt_state()`` if that step is not drawn yet), and the snapshots of the
        versions steps ``steps_done`` onwards sample with."""
        before = self.prompts_before[steps_done] if steps_done in self.prompts_before else prompt_state()
        first = behaviour_version(steps_done, self.k)
        return before, {v: w for v, w in self.snapshots.items() if v >= first}

    def restore(self, steps_done: int, saved: dict[str, Any]) -> None:
        """Continue after a checkpoint of ``steps_done`` steps: its snapshots; the next request is that step's
        (the prompt source was restored to its state before that step's draws)."""
        self.snapshots = dict(saved["versions"])
        self.next_request = steps_done

    def close(self) -> None:
        self.requests.put(None)
        self.thread.join()

    # ---- the sampler thread ----
    def _run(self) -> None:
        torch.set_num_threads(self.threads)
        try:
            while True:
                start = time.perf_counter()
                request = self.requests.get()
                with self.ready:
                    self.sampler_wait_s += time.perf_counter() - start
                if request is None:
                    return
                start = time.perf_counter()
                with self.lock:  # a vLLM sync runs its engine: never beside the main thread's engine
                    if request.version != self.loaded:
                        self._load(self.snapshots[request.version])
                        self.loaded = request.version
                    rollouts = self.sampler.generate(
                        request.problems, self.group_size, temperature=self.temperature, seed=request.seed
                    )
                sampled = Sampled(request.step, request.version, rollouts, time.perf_counter() - start)
                with self.ready:
                    self.done[request.step] = sampled
                    self.ready.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to the learner, which raises it at its next take
            with self.ready:
                self.error = error
                self.ready.notify_all()

    @torch.no_grad()
    def _load(self, snapshot: dict[str, torch.Tensor]) -> None:
        self.loaded = None  # until the sampler holds the snapshot: a failed sync leaves no version claimed
        self.weights.load_state_dict(snapshot)
        self.sampler.sync_weights(self.weights)
