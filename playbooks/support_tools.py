"""Tools of playbooks/support.yaml (an in-memory shop for demos and tests)."""

from __future__ import annotations

from typing import Literal

import anyio

from llmrtc import ToolContext, ToolError, tool

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
    if playbook is not None:  # the account's internal data goes to the playbook, not the model
        playbook.update_context(customer_id=customer["customer_id"])
        playbook.set_intent(str(customer["open_issue"]), 0.9)
    # Only what the agent may say: the caller hears whatever the model is given, so IDs and
    # plan codes stay out of the result (a voice agent reads fields out).
    return {"found": True, "first_name": customer["name"], "open_issue": customer["open_issue"]}


@tool
async def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its number (safe to run in parallel).

    Args:
        order_id: The order number, e.g. A1001.
    """
    await anyio.sleep(0.01)
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        return {"found": False, "order_id": order_id}
    # The owner's customer ID is internal: the agent only needs the order's own facts.
    return {
        "found": True,
        "order_id": order["order_id"],
        "total": order["total"],
        "charged_times": order["charged_times"],
    }


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
        # ToolError: words meant for the model (any other exception reaches it only as a
        # generic failure), so it can tell the caller what to fix.
        raise ToolError(f"there is no order {order_id!r}; ask the caller for the order number")
    if amount <= 0 or amount > float(order["total"]):  # type: ignore[arg-type]
        raise ToolError(f"the refund must be more than 0 and at most {order['total']}")
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
