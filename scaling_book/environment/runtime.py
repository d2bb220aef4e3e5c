"""The scaling-book environment: one agent seat, on the local subprocess runtime by default.

verifiers' default runtime is a remote sandbox service. Nothing of a scaling-book rollout runs in
its runtime (the harness is in-process and grading runs on the host), so the seat defaults to
`vf.SubprocessConfig()`: a plain `vf-eval scaling-book` stays on this machine and talks only to the
model endpoint it is given. `--env.agent.runtime.type` still overrides it.
"""

from __future__ import annotations

import verifiers.v1 as vf

from scaling_book.environment.harness import close_clients


class ScalingBookEnvConfig(vf.EnvConfig):
    """The single `agent` seat, defaulting to the local subprocess runtime."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy under evaluation; `--env.agent.*` overrides its model, sampling, limits."""


class ScalingBookEnv(vf.Env[ScalingBookEnvConfig]):
    """One agent answers each task once."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)

    async def stop(self) -> None:
        """Close the harness's shared HTTP client when the env stops serving."""
        await close_clients()


__all__ = ["ScalingBookEnv", "ScalingBookEnvConfig"]
