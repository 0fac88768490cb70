"""Adapters that put amem behind the memory interfaces agent frameworks already define.

One module per framework, each importable only with its extra installed and never imported
by ``import amem``; each uses amem's public API alone:

- ``amem.adapters.openai_agents``: ``AmemSession``, the OpenAI Agents SDK ``Session``
  (extra ``openai-agents``);
- ``amem.adapters.langgraph``: ``AmemStore``, LangGraph's ``BaseStore`` (extra ``langgraph``);
- ``amem.adapters.tools``: ``memory_tools``, plain async functions any function-calling
  framework registers as tools (no extra needed; ``pydantic-ai`` installs the one the
  docs use).

See docs/adapters.md.
"""
