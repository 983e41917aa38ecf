"""Tools of playbooks/support.yaml (an in-memory shop for demos and tests)."""

from __future__ import annotations

from typing import Literal

import anyio

from llmrtc import ToolContext, tool

CUSTOMERS = {
    "ada@example.com": {
        "customer_id": "C-1",
        "name": "Ada",
        "plan": "pro",
        "open_issue": "billing",
    },
    "bob@example.com": {
        "customer_id": "C-2",
        "name": "Bob",
        "plan": "basic",
        "open_issue": "technical",
    },
}
ORDERS = {
    "A1001": {"order_id": "A1001", "customer_id": "C-1", "total": 42.0, "charged_times": 2},
    "B2002": {"order_id": "B2002", "customer_id": "C-2", "total": 15.5, "charged_times": 1},
}


@tool
async def lookup_customer(email: str, ctx: ToolContext) -> dict[str, object]:
    """Find a customer by their account email.

    Args:
        email: The customer's account email address.
    """
    await anyio.sleep(0.01)  # a database
    customer = CUSTOMERS.get(email.strip().lower())
    if customer is None:
        return {"found": False, "email": email}
    playbook = ctx.metadata.get("playbook")
    if playbook is not None:  # tell the playbook what the caller most likely needs
        playbook.update_context(customer_id=customer["customer_id"])
        playbook.set_intent(str(customer["open_issue"]), 0.9)
    return {"found": True, **customer}


@tool
async def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its number (safe to run in parallel).

    Args:
        order_id: The order number, e.g. A1001.
    """
    await anyio.sleep(0.01)
    order = ORDERS.get(order_id.strip().upper())
    return {"found": False, "order_id": order_id} if order is None else {"found": True, **order}


@tool(execution_policy="sequential", timeout=5.0)
async def issue_refund(order_id: str, amount: float, reason: str) -> dict[str, object]:
    """Refund part or all of an order. Runs alone, after earlier calls; never twice at once.

    Args:
        order_id: The order to refund.
        amount: The amount to refund, in the order's currency.
        reason: Why the refund is given.
    """
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        raise ValueError(f"no order {order_id!r}")
    if amount <= 0 or amount > float(order["total"]):  # type: ignore[arg-type]
        raise ValueError(f"amount must be between 0 and {order['total']}")
    return {"refunded": amount, "order_id": order["order_id"], "reference": "R-" + order_id[-4:]}


@tool(execution_policy="sequential")
async def create_ticket(
    summary: str, severity: Literal["low", "normal", "high"] = "normal"
) -> dict[str, object]:
    """Open a support ticket for a technical problem.

    Args:
        summary: One sentence describing the problem.
        severity: How urgent it is.
    """
    return {"ticket_id": "T-" + str(abs(hash(summary)) % 10000), "severity": severity}
