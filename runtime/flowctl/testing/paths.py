"""A run's path in one line (golden cases, ``flowctl trace``, ``flowctl run``): imports nothing, so the
read commands print it without loading the case machinery."""
from __future__ import annotations


def one_line_path(path) -> str:
    """A run's path in the notation golden cases and ``flowctl trace`` use (the inverse of
    :func:`flowctl.testing.cases.parse_path`): states in order, repeats folded: ``['a', 'b', 'b', 'b', 'c']`` ->
    ``a → b ×3 → c``, and a loop of up to 4 states ``['a', 'b', 'a', 'b', 'c']`` -> ``(a → b) ×2 → c``."""
    path = list(path)
    parts = []
    i = 0
    while i < len(path):
        best_len, best_count = 1, 1
        for size in range(1, 5):  # the loop that covers the most states from here; shorter on ties
            unit = path[i:i + size]
            if len(unit) < size:
                break
            count = 1
            while path[i + count * size:i + (count + 1) * size] == unit:
                count += 1
            if count > 1 and count * size > best_count * best_len:
                best_len, best_count = size, count
        unit = path[i:i + best_len]
        text = " → ".join(unit)
        if best_count > 1:
            text = f"{text} ×{best_count}" if best_len == 1 else f"({text}) ×{best_count}"
        parts.append(text)
        i += best_len * best_count
    return " → ".join(parts)
