"""A generated 200-tool catalog and hand-labelled queries for benchmarks/catalog.py.

Twenty business domains x ten verbs. Each tool reads like a real one: a namespaced name, a
one-line description, tags and parameters. The queries were written by hand the way a caller
speaks; about a third share a word with their tool's name, the rest are paraphrases that do
not ("bill the client" for `invoices.create_invoice`).
"""

from __future__ import annotations

DOMAINS: dict[str, tuple[str, str, list[str]]] = {
    # namespace: (entity, plural, extra tags)
    "invoices": ("invoice", "invoices", ["billing", "finance"]),
    "payments": ("payment", "payments", ["billing", "money"]),
    "customers": ("customer", "customers", ["crm"]),
    "meetings": ("meeting", "meetings", ["calendar"]),
    "tickets": ("support ticket", "support tickets", ["support", "helpdesk"]),
    "orders": ("order", "orders", ["sales", "shop"]),
    "products": ("product", "products", ["catalog", "shop"]),
    "shipments": ("shipment", "shipments", ["logistics", "delivery"]),
    "files": ("file", "files", ["storage"]),
    "emails": ("email", "emails", ["messaging"]),
    "sms": ("text message", "text messages", ["messaging", "phone"]),
    "employees": ("employee", "employees", ["hr", "staff"]),
    "leaves": ("leave request", "leave requests", ["hr", "vacation"]),
    "contracts": ("contract", "contracts", ["legal"]),
    "tasks": ("task", "tasks", ["project"]),
    "reports": ("report", "reports", ["analytics"]),
    "subscriptions": ("subscription", "subscriptions", ["billing", "plans"]),
    "inventory": ("stock item", "stock items", ["warehouse"]),
    "reviews": ("customer review", "customer reviews", ["feedback"]),
    "users": ("user account", "user accounts", ["auth", "access"]),
}

VERBS: list[tuple[str, str, list[str], list[str]]] = [
    # (verb, description template, params, side effects)
    ("create", "Create a new {e}.", ["details"], ["adds a {e}"]),
    ("get", "Fetch one {e} by its id.", ["id"], []),
    ("list", "List {p}, newest first, with paging.", ["page", "page_size"], []),
    ("update", "Change fields of an existing {e}.", ["id", "fields"], ["modifies the {e}"]),
    ("delete", "Delete a {e} permanently.", ["id"], ["removes the {e} for good"]),
    ("search", "Search {p} by keywords.", ["query"], []),
    ("export", "Export {p} as a CSV file.", ["since"], []),
    ("send", "Send a {e} to someone by email.", ["id", "to"], ["sends an email"]),
    ("archive", "Archive a {e} so it is hidden from lists.", ["id"], ["hides the {e}"]),
    ("restore", "Restore an archived {e}.", ["id"], ["unhides the {e}"]),
]


def tool_specs(copies: int = 1) -> list[dict[str, object]]:
    """200 x `copies` tool specs (`copies` > 1 adds namespaces `invoices2`, ... for scale)."""
    specs: list[dict[str, object]] = []
    for copy in range(copies):
        suffix = "" if copy == 0 else str(copy + 1)
        for namespace, (entity, plural, tags) in DOMAINS.items():
            slug = entity.replace(" ", "_")
            for verb, template, params, effects in VERBS:
                specs.append(
                    {
                        "name": f"{namespace}{suffix}.{verb}_{slug}",
                        "description": template.format(e=entity, p=plural),
                        "tags": [namespace, *tags],
                        "params": params,
                        "side_effects": [s.format(e=entity) for s in effects],
                    }
                )
    return specs


QUERIES: list[tuple[str, str]] = [
    # (what a caller says, the tool that does it)
    # Sharing a word with the tool's name:
    ("create invoice", "invoices.create_invoice"),
    ("delete a customer", "customers.delete_customer"),
    ("list my meetings", "meetings.list_meeting"),
    ("export orders", "orders.export_order"),
    ("search products", "products.search_product"),
    ("send an email", "emails.send_email"),
    ("archive this task", "tasks.archive_task"),
    ("restore the contract", "contracts.restore_contract"),
    ("update employee", "employees.update_employee"),
    ("get shipment", "shipments.get_shipment"),
    ("cancel my subscription", "subscriptions.delete_subscription"),
    ("new support ticket", "tickets.create_support_ticket"),
    ("create a user account", "users.create_user_account"),
    ("search reports", "reports.search_report"),
    # Paraphrases, no word in common with the name:
    ("bill the client for last month", "invoices.create_invoice"),
    ("show me every bill we issued", "invoices.list_invoice"),
    ("email the bill to the accountant", "invoices.send_invoice"),
    ("who is this caller, look up their record", "customers.get_customer"),
    ("remove this client from our records", "customers.delete_customer"),
    ("add a new client", "customers.create_customer"),
    ("book an appointment for Tuesday", "meetings.create_meeting"),
    ("move my appointment to Friday", "meetings.update_meeting"),
    ("what appointments do I have", "meetings.list_meeting"),
    ("open a complaint for this caller", "tickets.create_support_ticket"),
    ("find the complaint about the broken printer", "tickets.search_support_ticket"),
    ("close out that complaint and hide it", "tickets.archive_support_ticket"),
    ("where is my parcel", "shipments.get_shipment"),
    ("list all deliveries", "shipments.list_shipment"),
    ("download the purchases as a spreadsheet", "orders.export_order"),
    ("place a purchase for the customer", "orders.create_order"),
    ("change the price of an item we sell", "products.update_product"),
    ("take that item off our store for good", "products.delete_product"),
    ("upload a document", "files.create_file"),
    ("erase this document", "files.delete_file"),
    ("text the customer their code", "sms.send_text_message"),
    ("hire a new worker", "employees.create_employee"),
    ("fire this staff member", "employees.delete_employee"),
    ("request vacation days", "leaves.create_leave_request"),
    ("approve the holiday request", "leaves.update_leave_request"),
    ("draft an agreement with the supplier", "contracts.create_contract"),
    ("bring back the agreement we hid", "contracts.restore_contract"),
    ("add a to-do item", "tasks.create_task"),
    ("mark the to-do as done", "tasks.update_task"),
    ("give me the analytics as a spreadsheet", "reports.export_report"),
    ("how many plans are active", "subscriptions.list_subscription"),
    ("upgrade the customer's plan", "subscriptions.update_subscription"),
    ("how much stock is left of this item", "inventory.get_stock_item"),
    ("restock the warehouse item", "inventory.update_stock_item"),
    ("show the feedback people left", "reviews.list_customer_review"),
    ("remove the abusive comment a buyer left", "reviews.delete_customer_review"),
    ("reset the login for this person", "users.update_user_account"),
    ("disable this login", "users.archive_user_account"),
    ("charge the card", "payments.create_payment"),
    ("look up a transaction", "payments.get_payment"),
]
