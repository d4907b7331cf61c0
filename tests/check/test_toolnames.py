"""FC608 (flowctl.check.toolnames): a contract's function is looked up in its tools module's source,
without importing it."""
from __future__ import annotations

from support.helpers import of, problems, where

BASE = {
    "states/done.yaml": "id: done\ntype: succeed\n",
    "states/t.yaml": "id: t\ntype: task\ntool: look@^1\n",
    "contracts/look.v1.0.0.yaml": "id: look\nversion: 1.0.0\nentrypoint: shop.orders:get_order\n",
    "transitions/flow.yaml": "flow: flow\nstart: t\ntransitions:\n  - from: t\n    to: done\n",
    "tools/shop/__init__.py": "",
    "tools/shop/orders.py": "import json\n\ndef get_order(input, call):\n    return {}\n",
}


def test_a_misspelled_function_is_located_with_the_nearest_name(make_project):
    root = make_project({**BASE, "contracts/look.v1.0.0.yaml":
                         "id: look\nversion: 1.0.0\nentrypoint: shop.orders:get_ordr\n"})
    (d,) = of(problems(root), "FC608")
    assert where(d) == ("orchestration/contracts/look.v1.0.0.yaml", 3, 13)
    assert d.severity == "error" and "defines no 'get_ordr'" in d.message and "get_order" in d.hint


def test_a_missing_module_is_named(make_project):
    root = make_project({**BASE, "contracts/look.v1.0.0.yaml":
                         "id: look\nversion: 1.0.0\nentrypoint: shop.order:get_order\n"})
    (d,) = of(problems(root), "FC608")
    assert "no module 'shop.order'" in d.message and "shop/order.py" in d.message


def test_defined_names_of_every_kind_are_found(make_project):
    source = ("import json as j\nfrom os import path\ntry:\n    import x\nexcept ImportError:\n    def fb(i, c): ...\n"
              "if True:\n    class K: ...\nv: int = 1\na, b = 1, 2\n")
    for name in ("j", "path", "x", "fb", "K", "v", "a", "b"):
        root = make_project({**BASE, "tools/shop/orders.py": source, "contracts/look.v1.0.0.yaml":
                             f"id: look\nversion: 1.0.0\nentrypoint: shop.orders:{name}\n"})
        assert of(problems(root), "FC608") == [], name


def test_a_module_that_makes_names_at_run_time_is_not_judged(make_project):
    for source in ("def __getattr__(name):\n    return print\n", "from json import *\n", "globals()['f'] = print\n"):
        root = make_project({**BASE, "tools/shop/orders.py": source})
        assert of(problems(root), "FC608") == [], source


def test_verify_and_compensate_are_checked_and_a_package_submodule_counts(make_project):
    root = make_project({**BASE, "contracts/look.v1.0.0.yaml":
                         "id: look\nversion: 1.0.0\nentrypoint: shop:orders\nverify: shop.orders:chek\n"})
    (d,) = of(problems(root), "FC608")
    assert d.message.startswith("verify shop.orders:chek")


def test_an_installed_or_unknown_module_is_left_to_the_import_check(make_project):
    root = make_project({**BASE, "contracts/look.v1.0.0.yaml":
                         "id: look\nversion: 1.0.0\nentrypoint: elsewhere:get_order\n"})
    assert of(problems(root), "FC608") == []


def test_a_tools_module_that_does_not_parse_is_an_error_once_located_in_the_tool_code(make_project):
    """(new-user finding: a syntax error in tool code passed plain validate; only --import-check, which
    runs the modules, or the run itself found it)"""
    root = make_project({**BASE, "contracts/other.v1.0.0.yaml": "id: other\nversion: 1.0.0\nentrypoint: shop.orders:get_order\n",
                         "tools/shop/orders.py": BASE["tools/shop/orders.py"] + "\ndef broken(:\n"})
    (d,) = of(problems(root), "FC603")  # once, though two contracts name the module
    assert d.severity == "error" and "orchestration/tools/shop/orders.py:6:12: invalid syntax" in d.message, d.message
    assert not of(problems(root), "FC608")
