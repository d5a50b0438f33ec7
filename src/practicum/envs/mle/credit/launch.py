"""Running instrumented code without ever writing its markers where the code can read them.

The policy's code, as it wrote it, is main.py in the work folder; the instrumented version
(marker prints with the run's secret nonce, evidence expressions) reaches the interpreter only
through stdin, read whole by a short bootstrap (`BOOTSTRAP`, passed with -c: no secret in the
command line) before any of the policy's code runs. The bootstrap then

- points stdin at /dev/null (nothing of the payload is left to read),
- maps line numbers back onto main.py (inserted marker lines take the number of the line
  they follow), so tracebacks quote the policy's own lines,
- runs the code as `__main__` with `__file__` = the real main.py and sys.argv = ["main.py"]:
  honest code using `__file__`, `sys.argv` or `inspect.getsource` works and reads only the
  policy's own code,
- defines the evidence helpers (`evidence.ROWS`, `evidence.ESTIMATOR`) as builtins.

The nonce then lives only in the interpreter's memory (the code object's constants); code that
reaches for frames or code objects (`outcome.self_inspection`) gets no milestone credit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from practicum.envs.sandbox import Limits, RunResult, run_command
from practicum.envs.sandbox.workdir import write_script

SCRIPT = "main.py"

BOOTSTRAP = r"""
import ast as _a, builtins as _b, json as _j, os as _o, sys as _s, types as _y
def _run():
    payload = _j.loads(_s.stdin.read())
    null = _o.open(_o.devnull, _o.O_RDONLY)
    _o.dup2(null, 0)
    _o.close(null)
    tree = _a.parse(payload["code"])
    inserted = set(payload["markers"])
    new_line, shift = {}, 0
    for number in range(1, payload["code"].count("\n") + 2):
        shift += number in inserted
        new_line[number] = max(1, number - shift)
    for node in _a.walk(tree):
        for key in ("lineno", "end_lineno"):
            if getattr(node, key, None):
                setattr(node, key, new_line.get(getattr(node, key), 1))
    def rows(thunk):
        try:
            value = thunk()
            shape = getattr(value, "shape", None)
            return int(shape[0]) if shape else len(value)
        except BaseException:
            return -1
    def estimator(thunk):
        try:
            value = thunk()
            library = any(c.__module__.split(".")[0] not in ("__main__", "builtins")
                          for c in type(value).__mro__)
            able = any(callable(getattr(value, m, None))
                       for m in ("fit", "predict", "predict_proba", "forward"))
            return int(library and able)
        except BaseException:
            return 0
    setattr(_b, "__practicum_rows__", rows)
    setattr(_b, "__practicum_estimator__", estimator)
    path = _o.path.abspath("main.py")
    _s.argv = ["main.py"]
    _s.path[0] = _o.path.dirname(path)
    main = _y.ModuleType("__main__")
    main.__file__, main.__builtins__ = path, _b
    _s.modules["__main__"] = main
    return compile(tree, path, "exec"), main.__dict__
try:
    exec(*_run())
except SystemExit:
    raise
except BaseException as _e:
    import traceback as _t
    _t.print_exception(type(_e), _e, _e.__traceback__.tb_next)
    _s.exit(1)
"""


def run_instrumented(
    original: str, instrumented: str, markers: list[int], workdir: Path, limits: Limits, **sandbox
) -> RunResult:
    """Write `original` as main.py, run `instrumented` through the bootstrap (docstring).

    markers: 1-based lines of `instrumented` that are inserted marker prints.
    `sandbox`: hidden_paths, backend, cancel, ... as for `run_command`.
    """
    write_script(Path(workdir), SCRIPT, original)
    payload = json.dumps({"code": instrumented, "markers": markers})
    return run_command([sys.executable, "-c", BOOTSTRAP], workdir, limits, stdin=payload, **sandbox)
