"""A fake of the checks the accuracy search runs (:class:`mxnet_amp.auto.runner.Runs`'s
``check`` and ``budget_left``, its ``log``'s ``results`` and ``executions``, its ``config``'s
``accuracy_reason``, ``criterion_words`` and budget): a configuration passes exactly when
it keeps every planted culprit in float32, so the culprits found and the executions spent
are known exactly. Cached like Runs: ``log.executions`` counts distinct configurations."""
from __future__ import annotations

from types import SimpleNamespace


class FakeRuns:
    """``culprits``: the planted set (a configuration passes when it holds all of them);
    ``passes``: another rule instead (a callable of the configuration), for checks that are
    not monotone. A configuration's error is the number of culprits it leaves in low
    precision (0.5 of the tolerance once none is left)."""

    def __init__(self, culprits=(), max_executions=None, passes=None):
        self.culprits = frozenset(culprits)
        self.rule = passes
        self.config = SimpleNamespace(accuracy_reason="accuracy",
                                      settings=SimpleNamespace(max_executions=max_executions),
                                      criterion_words=lambda: "relative error <= 0.01")
        self.log = SimpleNamespace(executions=0, results={})
        self.kinds = []

    @property
    def budget_left(self):
        budget = self.config.settings.max_executions
        return budget is None or self.log.executions < budget

    def check(self, excluded, kind):
        if excluded not in self.log.results:
            self.log.executions += 1
            self.kinds.append(kind)
            missing = len(self.culprits - excluded)
            passed = self.rule(excluded) if self.rule is not None else not missing
            ratio = 0.5 if passed else float(max(missing, 1))
            self.log.results[excluded] = SimpleNamespace(passed=passed, tolerance_ratio=ratio,
                                                     relative_error=0.01 * ratio,
                                                     max_abs_error=ratio)
        return self.log.results[excluded]

    def verdict_words(self, excluded):
        return f"relative error {self.log.results[excluded].relative_error:.3g}"

    def one_minimal(self, base, kept):
        """Whether ``base | kept`` passes and each kept node removed alone fails (checked
        here, outside the counts)."""
        rule = self.rule or (lambda c: self.culprits <= c)
        full = frozenset(base) | frozenset(kept)
        return rule(full) and not any(rule(full - {n}) for n in kept)
