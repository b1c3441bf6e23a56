"""An adk-memory sample agent; ADK loads `agent.app`."""

from . import agent

__all__ = ["agent"]
