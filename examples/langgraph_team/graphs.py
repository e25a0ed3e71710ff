"""The three agents' LangGraph graphs: planner -> researcher -> writer.

Each is its own graph on its own thread. The chat model is langchain-core's
ParrotFakeChatModel (it answers with the prompt it was given), so every answer is a
pure function of the input: a run needs no network and a rerun gives the same text.
A step's messages to other agents are returned in the state's `outbox` (replaced at
every step); the agent process sends them.
"""
from __future__ import annotations

import operator
from typing import Annotated, Any, Callable, TypedDict

from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

MODEL = ParrotFakeChatModel()
PARTS = 4  # the planner splits the topic into this many research tasks
TOPIC = "checkpointing multi-agent systems"


class AgentState(TypedDict, total=False):
    incoming: dict[str, Any]  # the message this step handles
    notes: Annotated[list[str], operator.add]  # what the agent has done, in order
    findings: Annotated[list[str], operator.add]  # the writer's collected findings
    outbox: list[dict[str, Any]]  # messages to send after this step: {"to": ..., "body": {...}}
    answer: str


def ask(prompt: str) -> str:
    return str(MODEL.invoke(prompt).content)


def plan(state: AgentState) -> AgentState:
    part = state["incoming"]["part"]
    task = ask(f"research part {part} of {TOPIC}")
    return {"notes": [f"planned {part}"], "outbox": [{"to": "researcher", "body": {"part": part, "task": task}}]}


def research(state: AgentState, config: RunnableConfig) -> AgentState:
    """Calls the search tool (an external side effect) and summarises what it found."""
    task = state["incoming"]
    tool: Callable[[int, str], str] = config["configurable"]["tool"]
    found = tool(task["part"], task["task"])
    finding = ask(f"finding {task['part']}: {found}")
    return {"notes": [f"researched {task['part']}"],
            "outbox": [{"to": "writer", "body": {"part": task["part"], "finding": finding}}]}


def write(state: AgentState) -> AgentState:
    body = state["incoming"]
    return {"notes": [f"noted {body['part']}"], "findings": [body["finding"]], "outbox": []}


def conclude(state: AgentState) -> AgentState:
    answer = ask("report: " + " | ".join(sorted(state["findings"])))
    return {"answer": answer}


def complete(state: AgentState) -> str:
    return "conclude" if len(state.get("findings", [])) >= PARTS else END


def build(role: str, saver: BaseCheckpointSaver) -> Any:
    builder = StateGraph(AgentState)
    if role == "planner":
        builder.add_node("plan", plan)
        builder.add_edge(START, "plan")
        builder.add_edge("plan", END)
    elif role == "researcher":
        builder.add_node("research", research)
        builder.add_edge(START, "research")
        builder.add_edge("research", END)
    elif role == "writer":
        builder.add_node("write", write)
        builder.add_node("conclude", conclude)
        builder.add_edge(START, "write")
        builder.add_conditional_edges("write", complete)
        builder.add_edge("conclude", END)
    else:
        raise ValueError(f"unknown role {role!r}")
    return builder.compile(checkpointer=saver)


def expected_answer() -> str:
    """The final answer of a run without failures, computed without any agent."""
    findings = [ask(f"finding {p}: " + search_result(p, ask(f"research part {p} of {TOPIC}"))) for p in range(PARTS)]
    return ask("report: " + " | ".join(sorted(findings)))


def search_result(part: int, task: str) -> str:
    """What the search tool returns for a task (deterministic)."""
    return f"3 sources on [{task}]"
