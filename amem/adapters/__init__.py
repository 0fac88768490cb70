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


def missing_extra(adapter: str, needs: str, extra: str) -> ImportError:
    """What ``amem.adapters.<adapter>`` raises, from the ``ImportError``, when the framework
    behind it (``needs``) is not installed."""
    return ImportError(
        f"amem.adapters.{adapter} needs {needs}: "
        f"install amem with the '{extra}' extra (pip install 'amem[{extra}]')"
    )
