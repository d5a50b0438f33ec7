"""`ast.parse` behind one lock.

CPython before 3.11.8 / 3.12.1 can raise `SystemError: AST constructor recursion depth mismatch`
when two threads build ASTs at once or one build fails (python/cpython#106905): actor threads
parse model-written code concurrently, so every parse in practicum goes through here.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, *args, **kwargs) -> ast.AST:
    with _LOCK:
        return ast.parse(source, *args, **kwargs)
