"""Example tools of the demo shop that the flows in ``orchestration/`` call.

Every tool follows the contract protocol (see ``orchestration/contracts/``)::

    tool(input: dict, call) -> dict              # call: run_id, step, attempt, idempotency_key, deadline
    verify(input, output, call) -> bool          # did the side effect really happen?
    compensate(input, output, call) -> None      # undo it (idempotent)

They act on a local SQLite shop database (:mod:`shop_tools.db`; ``$FLOWCTL_SHOP_DB``, default
``.flowctl/shop.db``), created and seeded on first use. Modules:

=============  ===========================================================================
orders         ``get_order`` — read an order with its payment (read-only)
returns        ``check_return_policy`` and its fallback ``cached_return_policy`` (read-only)
logistics      ``get_logistics`` (v2) and ``get_logistics_v1`` — carrier lookup (read-only)
payments       ``refund`` / ``verify_refund`` / ``cancel_refund`` — side effects on payments
reports        ``build_sales_report`` — sales figures and the e-mail that carries them
mail           ``send_email`` / ``verify_email`` / ``recall_email`` — writes to the outbox
=============  ===========================================================================
"""
