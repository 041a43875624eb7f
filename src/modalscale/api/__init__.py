"""The typed API of modalscale's two kinds, shared by the operator, the autoscaler, the budget planner and the runtime.

Pure and kopf-free (kubebuilder's ``api/`` package, Karpenter's ``pkg/apis``): it parses and validates what the CRDs
hold, and names what the operator writes back (annotations, condition types and reasons, each kind's status). It is
the bottom layer: it imports no kopf, kubernetes or httpx and nothing of the cost model, the autoscaler, the operator
or the runtime, directly or through another module (an import-linter contract in ``pyproject.toml`` and
``tests/unit/test_layout.py`` hold it to that).
"""
