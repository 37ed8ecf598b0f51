"""Drop-in adapters for agent frameworks, each a module with its own optional dependency:

- :mod:`hyperlightd.integrations.agent_framework`: Microsoft Agent Framework
  (``pip install hyperlightd[agent-framework]``);
- :mod:`hyperlightd.integrations.smolagents`: a remote Python executor for ``CodeAgent``
  (``hyperlightd[smolagents]``);
- :mod:`hyperlightd.integrations.openai_agents`: a function tool for the OpenAI Agents SDK
  (``hyperlightd[openai-agents]``);
- :mod:`hyperlightd.integrations.langchain`: a LangChain ``BaseTool`` (``hyperlightd[langchain]``).

The tools all describe the same thing to the model and answer with the same text
(:mod:`hyperlightd.integrations._observation`): what the program printed, its result, or how
it failed, so a model can act on it."""
