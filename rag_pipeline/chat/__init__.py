"""The conversational layer: one chat turn (turn), the agent loop over the tools (agent, tools), the deterministic
planner used without an LLM (planner), the answer composed from tool results (compose), conversation memory."""
