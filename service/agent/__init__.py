"""The agent runtime: durable session trees and streaming Anthropic runs with tools.

The captain needs these names (see ``docs/agent-runtime.md``):
:class:`~service.agent.agent.Agent`, :class:`~service.agent.agent.AgentConfig`,
:class:`~service.agent.session.SessionTree`,
:class:`~service.agent.provider.AnthropicProvider`,
:class:`~service.agent.tools.Tool` / ``ToolResult``,
:class:`~service.agent.content.UserMessage`,
:class:`~service.agent.outcome.RunOutcome` / ``OutcomeKind``, and the events
in :mod:`service.agent.events`. Import them from their modules.
"""
