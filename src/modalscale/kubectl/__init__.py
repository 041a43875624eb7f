"""``kubectl modalscale``: a kubectl plugin that explains what the operator decided, from the objects' status.

Why a package: the operator records its decisions in status (an InferenceService's ``status.autoscaler`` and
``status.scalingHistory``, a BudgetPolicy's ledger, thresholds, enforcement and outbox), and ``kubectl get -o
yaml`` shows them raw. This plugin reads the same objects, read-only, and answers the three questions a user has
(why this many replicas, what does this service cost, where does this budget stand), as kubecost's ``kubectl
cost`` does for OpenCost. ``render`` turns status dicts into reports and text (pure, unit tested on statuses the
operator's own planners write); ``cli`` is the executable ``kubectl-modalscale`` (kube access and errors).
"""
